package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/hutch-sandbox/hutch/internal/store"
)

// errPaused is the error of the calls a paused sandbox refuses at once
// (commands, files), rather than leaving them hanging until it resumes.
func errPaused(id string) error {
	return fmt.Errorf("sandbox %s is paused (resume it first): %w", id, ErrConflict)
}

// Pause freezes every process of tenant's sandbox id ("" tenant: any)
// where it is, until Resume. While it is paused, commands and file calls
// fail at once with ErrConflict and the idle timeout does not run; its
// timeout still does, and Destroy ends it as any other. Pausing a paused
// sandbox is a conflict. A sandbox whose tier can save it (gVisor's,
// without secrets) is paused to disk: saved in its directory, its
// processes ended and their memory freed, kept by Close for the next
// daemon (checkpoint.go); commands in flight then lose their streams but
// go on running. A failed save leaves it running, and the error says why.
func (m *Manager) Pause(ctx context.Context, tenant, id string) (Info, error) {
	return m.setPaused(ctx, tenant, id, true)
}

// Resume lets the processes of tenant's paused sandbox id ("" tenant: any)
// go on; the idle timeout counts from now. A sandbox paused to disk starts
// again from there, by this daemon or a later one; when that fails it
// stays paused, and the error says why. Resuming a sandbox that is not
// paused is a conflict.
func (m *Manager) Resume(ctx context.Context, tenant, id string) (Info, error) {
	if err := m.enter(); err != nil {
		return Info{}, err
	}
	defer m.leave()
	if info, ok, err := m.resumeDormant(ctx, tenant, id); ok {
		return info, err
	}
	return m.setPaused(ctx, tenant, id, false)
}

// setPaused pauses (pause) or resumes sandbox id.
func (m *Manager) setPaused(ctx context.Context, tenant, id string, pause bool) (Info, error) {
	what, state, kind := "resume", store.StateRunning, EventResumed
	if pause {
		what, state, kind = "pause", store.StatePaused, EventPaused
	}
	if err := m.enter(); err != nil {
		return Info{}, err
	}
	defer m.leave()
	l, err := m.running(ctx, tenant, id)
	if err != nil {
		return Info{}, err
	}
	l.pauseMu.Lock()
	defer l.pauseMu.Unlock()

	m.mu.Lock()
	stopping, paused := l.stopping, l.paused
	if !stopping && pause && !paused {
		// Marked first, so that no command or file call starts while
		// the sandbox freezes.
		l.paused = true
	}
	m.mu.Unlock()
	switch {
	case stopping:
		return Info{}, fmt.Errorf("sandbox %s is stopping: %w", id, ErrConflict)
	case pause && paused:
		return Info{}, fmt.Errorf("sandbox %s: pause: it is paused already: %w", id, ErrConflict)
	case !pause && !paused:
		return Info{}, fmt.Errorf("sandbox %s: resume: it is not paused: %w", id, ErrConflict)
	}
	if pause && m.toDisk(l) {
		return m.pauseToDisk(ctx, l)
	}

	if pause {
		err = l.inst.Freeze()
	} else {
		err = l.inst.Thaw()
	}
	if err != nil {
		if pause { // a failed Freeze has thawed the sandbox again
			m.mu.Lock()
			l.paused = false
			m.mu.Unlock()
		}
		return Info{}, fmt.Errorf("sandbox %s: %s: %w", id, what, err)
	}
	now := time.Now()
	if !pause {
		l.lastActive.Store(now.UnixNano())
		m.mu.Lock()
		l.paused = false
		m.mu.Unlock()
	}
	sb, err := m.st.UpdateSandbox(context.Background(), id, func(sb *store.Sandbox) error {
		if sb.State != store.StateRunning && sb.State != store.StatePaused {
			return fmt.Errorf("it is %s: %w", sb.State, ErrConflict)
		}
		sb.State = state
		if !pause {
			sb.LastActive = now
		}
		return nil
	})
	if err != nil {
		return Info{}, fmt.Errorf("sandbox %s: %s: %w", id, what, err)
	}
	l.ev.append(kind, nil, false)
	m.log.Info("sandbox "+what+"d", "sandbox", id, "tenant", l.tenant)
	return infoOf(sb), nil
}
