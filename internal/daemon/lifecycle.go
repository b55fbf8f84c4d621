package daemon

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hutch-sandbox/hutch/internal/store"
)

// Lifecycle says what becomes of a sandbox when its timeout passes. Its
// zero value ends it (Destroy's end, with a timeout event).
type Lifecycle struct {
	// PauseOnTimeout pauses the sandbox when its timeout passes instead
	// of ending it (E2B's autoPause): it is then kept paused for the
	// daemon's MaxTimeout, after which it ends as any sandbox whose
	// timeout passed, unless it was resumed (which gives it its
	// lifetime again) or its timeout extended meanwhile. A sandbox paused
	// by hand whose timeout passes is kept so too.
	PauseOnTimeout bool
	// FilesOnly makes that pause one without memory (PauseOptions): on
	// resume the sandbox boots again, cold.
	FilesOnly bool
}

// ResumeOptions are the options of ResumeWith.
type ResumeOptions struct {
	// Reboot resumes the sandbox as a cold boot even if it was paused
	// with its memory: every process but its agent is killed (the
	// namespace tier) or the tier starts it afresh over the files it kept
	// (gVisor, paused to disk), and it gets a new boot ID. A sandbox
	// paused without its memory is always resumed so.
	Reboot bool
}

// bootIDFile is the file, in a sandbox's directory, bound over the
// sandbox's /proc/sys/kernel/random/boot_id (namespace tier): its boot ID,
// written anew at each cold boot.
const bootIDFile = "boot_id"

// writeBootID writes a new random boot ID (a version 4 UUID, as the
// kernel's) into the file path, in place: a sandbox that has it bound
// sees the new one at once. It is made 0444, owned by the daemon's user.
func writeBootID(path string) error {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	id := fmt.Sprintf("%x-%x-%x-%x-%x\n", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o444)
	if err != nil {
		return fmt.Errorf("boot id: %w", err)
	}
	_, err = f.WriteString(id)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("boot id: %w", err)
	}
	return nil
}

// newBoot gives l, about to boot again cold, a new boot ID, if it has a
// file of its own for it (the namespace tier; gVisor's kernel makes its
// own at each boot).
func (m *Manager) newBoot(l *live) error {
	path := filepath.Join(l.dir, bootIDFile)
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	return writeBootID(path)
}

// onTimeout acts on l, whose timeout passed and whose Lifecycle pauses
// it then: it is given the daemon's MaxTimeout to live on paused, then
// paused (without its memory, if its Lifecycle says so) unless it is
// already. When that pause fails the sandbox ends, as any whose timeout
// passed. Run by the reaper, in a goroutine of its own (l.timeoutBusy
// set).
func (m *Manager) onTimeout(l *live) {
	defer func() {
		m.mu.Lock()
		l.timeoutBusy = false
		m.mu.Unlock()
	}()
	ctx := context.Background()
	log := m.log.With("sandbox", l.id, "tenant", l.tenant)
	expires := time.Now().Add(m.cfg.MaxTimeout)
	m.mu.Lock()
	paused, stopping := l.paused, l.stopping
	if !stopping {
		l.expires = expires
	}
	m.mu.Unlock()
	if stopping {
		return
	}
	if _, err := m.st.UpdateSandbox(ctx, l.id, func(sb *store.Sandbox) error {
		sb.Expires = expires
		return nil
	}); err != nil {
		log.Error("record the expiry of a sandbox paused on its timeout", "err", err)
	}
	if paused {
		log.Info("sandbox paused at its timeout: kept paused", "until", expires)
		return
	}
	_, err := m.PauseWith(ctx, l.tenant, l.id, PauseOptions{FilesOnly: l.life.FilesOnly, onTimeout: true})
	if err != nil {
		log.Warn("pause on timeout failed: the sandbox ends", "err", err)
		m.end(l, EventTimeout, fmt.Sprintf("its timeout passed, and pausing it failed: %v", err))
		return
	}
	log.Info("sandbox paused on its timeout", "memory", !l.life.FilesOnly, "until", expires)
}

// relive gives a sandbox paused on its timeout (autoPaused), just resumed
// as l, its lifetime again from now.
func (m *Manager) relive(l *live) {
	m.mu.Lock()
	again := l.autoPaused && !l.stopping && l.lifetime > 0
	l.autoPaused = false
	expires := time.Now().Add(l.lifetime)
	if again {
		l.expires = expires
	}
	m.mu.Unlock()
	if !again {
		return
	}
	if _, err := m.st.UpdateSandbox(context.Background(), l.id, func(sb *store.Sandbox) error {
		sb.Expires = expires
		return nil
	}); err != nil {
		m.log.Error("record the expiry of a resumed sandbox", "sandbox", l.id, "err", err)
	}
}

// ResumeWith resumes tenant's paused sandbox id ("" tenant: any) as
// Resume does, with o.
func (m *Manager) ResumeWith(ctx context.Context, tenant, id string, o ResumeOptions) (Info, error) {
	if err := m.enter(); err != nil {
		return Info{}, err
	}
	defer m.leave()
	if info, ok, err := m.resumeDormant(ctx, tenant, id, o); ok {
		return info, err
	}
	return m.setPaused(ctx, tenant, id, false, PauseOptions{reboot: o.Reboot})
}
