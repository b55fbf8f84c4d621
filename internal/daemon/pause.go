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
// Pause is PauseWith with no options: the sandbox keeps its memory.
func (m *Manager) Pause(ctx context.Context, tenant, id string) (Info, error) {
	return m.PauseWith(ctx, tenant, id, PauseOptions{})
}

// PauseOptions are the options of PauseWith.
type PauseOptions struct {
	// FilesOnly pauses the sandbox without its memory: every process of
	// it but its agent (PID 1) is killed first, and the sandbox is then
	// paused as Pause does, its root layer (its files) kept. Resume makes
	// it running again with no process but the agent: commands run
	// afresh, and those running at the pause ended with SIGKILL. A
	// sandbox paused to disk so (gVisor's) saves little more than its
	// files and the agent. Its paused event says {"memory": false}.
	FilesOnly bool

	// onTimeout: the pause is the sandbox's Lifecycle's, on its timeout;
	// reboot (a resume's): ResumeOptions.Reboot.
	onTimeout, reboot bool
}

// killAllTimeout bounds how long the agent of a sandbox paused without
// its memory may take to kill every other process of it, a sandbox
// forking as fast as it can included.
const killAllTimeout = 30 * time.Second

// PauseWith pauses tenant's sandbox id ("" tenant: any) as Pause does,
// with o. A files-only pause whose kill fails or does not finish leaves
// the sandbox running (what was killed is gone), and the error says why:
// never is the sandbox paused with its memory instead.
func (m *Manager) PauseWith(ctx context.Context, tenant, id string, o PauseOptions) (Info, error) {
	return m.setPaused(ctx, tenant, id, true, o)
}

// PausedWithMemory reports whether tenant's sandbox id ("" tenant: any),
// paused, kept its memory (Pause, not PauseWith FilesOnly); false for a
// sandbox that is not paused.
func (m *Manager) PausedWithMemory(ctx context.Context, tenant, id string) (bool, error) {
	sb, err := m.row(ctx, tenant, id)
	if err != nil {
		return false, err
	}
	if sb.State != store.StatePaused {
		return false, nil
	}
	if sb.Checkpoint != "" {
		rs, err := readResume(sb.Checkpoint)
		if err != nil {
			return false, fmt.Errorf("sandbox %s: %w", id, err)
		}
		return !rs.FilesOnly, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.live[id]
	return l == nil || !l.filesOnly, nil
}

// Resume lets the processes of tenant's paused sandbox id ("" tenant: any)
// go on; the idle timeout counts from now. A sandbox paused to disk starts
// again from there, by this daemon or a later one; when that fails it
// stays paused, and the error says why. Resuming a sandbox that is not
// paused is a conflict.
// A sandbox paused without its memory boots again, cold (ResumeOptions).
func (m *Manager) Resume(ctx context.Context, tenant, id string) (Info, error) {
	return m.ResumeWith(ctx, tenant, id, ResumeOptions{})
}

// setPaused pauses (pause, with o) or resumes sandbox id.
func (m *Manager) setPaused(ctx context.Context, tenant, id string, pause bool, o PauseOptions) (Info, error) {
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
	if rt := m.remote(l.tier); rt != nil {
		// Unsupported, not a conflict: E2B's SDKs take a conflict
		// of a pause for "paused already".
		return Info{}, fmt.Errorf("sandbox %s: %s: not for sandboxes on %s: %w", id, what, rt.Remote(), ErrUnsupported)
	}
	if pause && o.FilesOnly || !pause && o.reboot {
		if err := tierRefuses(l.tier, lackColdBoot); err != nil {
			return Info{}, fmt.Errorf("sandbox %s: %s: %w", id, what, err)
		}
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
	var data map[string]any // of the paused event
	if pause && o.FilesOnly {
		if err := m.killAll(ctx, l); err != nil {
			m.mu.Lock()
			l.paused = false
			m.mu.Unlock()
			return Info{}, fmt.Errorf("sandbox %s: pause without memory: %w; it runs on, without the processes that were killed", id, err)
		}
		data = map[string]any{"memory": false}
	}
	if pause && m.toDisk(l) {
		return m.pauseToDisk(ctx, l, o)
	}

	cold := !pause && (l.filesOnly || o.reboot)
	var killErr error // a cold boot's: the sandbox resumed all the same
	if cold {
		data = map[string]any{"boot": "cold"}
		err, killErr = m.coldBoot(ctx, l)
	} else if pause {
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
	m.mu.Lock()
	if pause {
		l.filesOnly = o.FilesOnly
		l.autoPaused = o.onTimeout
	} else {
		l.lastActive.Store(now.UnixNano())
		l.paused, l.filesOnly = false, false
	}
	m.mu.Unlock()
	if pause && o.onTimeout {
		if data == nil {
			data = map[string]any{}
		}
		data["reason"] = "its timeout passed"
	}
	if !pause {
		m.relive(l)
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
	l.ev.append(kind, data, false)
	if killErr != nil {
		m.log.Warn("sandbox resumed cold, but not every process was killed", "sandbox", id, "tenant", l.tenant, "err", killErr)
		return infoOf(sb), fmt.Errorf("sandbox %s: resume: %w; it runs on, without the processes that were killed", id, killErr)
	}
	if pause {
		m.log.Info("sandbox paused", "sandbox", id, "tenant", l.tenant, "memory", !o.FilesOnly)
	} else {
		m.log.Info("sandbox resumed", "sandbox", id, "tenant", l.tenant, "cold", cold)
	}
	return infoOf(sb), nil
}

// killAll has the agent of l, marked paused (under l.pauseMu), kill every
// other process of the sandbox: the one way that reaches them in every
// tier (gVisor's processes live in its kernel, not on the host), bounded
// to the sandbox by the kernel (the agent is PID 1 of its pid namespace)
// and robust to a process forking while it runs (the agent goes on until
// none is left).
func (m *Manager) killAll(ctx context.Context, l *live) error {
	ctx, cancel := context.WithTimeout(ctx, killAllTimeout)
	defer cancel()
	start := time.Now()
	if err := l.client.KillAll(ctx); err != nil {
		return err
	}
	m.log.Debug("killed every process but the agent", "sandbox", l.id, "took", time.Since(start))
	return nil
}

// coldBoot resumes l, paused in memory (frozen), as a boot afresh: it is
// thawed with a new boot ID, and every process but its agent killed unless
// it was paused without its memory (none is left then). It holds
// l.pauseMu; l stays marked paused, so that no command starts meanwhile.
// An error leaves it paused; when the kill fails (killErr) it runs on,
// with what was not killed.
func (m *Manager) coldBoot(ctx context.Context, l *live) (err, killErr error) {
	if err := m.newBoot(l); err != nil {
		return err, nil
	}
	if err := l.inst.Thaw(); err != nil {
		return err, nil
	}
	if l.filesOnly {
		return nil, nil
	}
	if err := m.killAll(ctx, l); err != nil {
		return nil, fmt.Errorf("boot again without its memory: %w", err)
	}
	return nil, nil
}
