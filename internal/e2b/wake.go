package e2b

import (
	"context"
	"errors"

	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// ErrNoAutoResume is the category of Wake's error for a paused sandbox
// that traffic may not resume: created without autoResume, or paused
// without its memory (which only connect or resume bring back).
var ErrNoAutoResume = errors.New("paused, and not resumed by traffic")

// wakeCall is one Wake in progress for a sandbox, which the Wakes of the
// same sandbox meanwhile wait for and share.
type wakeCall struct {
	done chan struct{}
	err  error
}

// Wake resumes tenant's sandbox id if it is paused and its record allows
// traffic to resume it (E2B's autoResume: created with autoPause and
// autoResume enabled, paused with its memory); it returns nil once the
// sandbox runs. Many Wakes at once resume it once: the others wait for
// that one and share its outcome. It is for the front ends that carry
// traffic to a sandbox: envd's requests (Resolve) and its ports. An error
// wraps ErrNoAutoResume (paused, and it may not be resumed so),
// daemon.ErrNotFound (no such sandbox of tenant's, or it is gone) or the
// resume's error; a sandbox that is not paused is no error.
func (h *Handler) Wake(ctx context.Context, tenant, id string) error {
	rec, ok := h.record(ctx, tenant, id)
	if !ok {
		return errorf(daemon.ErrNotFound, "sandbox %s: not found", id)
	}
	h.mu.Lock()
	c := h.waking[id]
	first := c == nil
	if first {
		c = &wakeCall{done: make(chan struct{})}
		if h.waking == nil {
			h.waking = map[string]*wakeCall{}
		}
		h.waking[id] = c
	}
	h.mu.Unlock()
	if first {
		// Its own context: the callers that share it may outlive the
		// first's request.
		c.err = h.wake(context.WithoutCancel(ctx), tenant, id, rec)
		h.mu.Lock()
		delete(h.waking, id)
		h.mu.Unlock()
		close(c.done)
		return c.err
	}
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// wake is Wake's one resume of sandbox id, whose record is rec.
func (h *Handler) wake(ctx context.Context, tenant, id string, rec record) error {
	info, err := h.m.Get(ctx, tenant, id)
	if err != nil {
		return err
	}
	if info.State != store.StatePaused {
		return nil
	}
	if !rec.autoResume {
		return errorf(ErrNoAutoResume, "sandbox %s is paused; it was not created with autoResume: resume it with connect", id)
	}
	withMem, err := h.m.PausedWithMemory(ctx, tenant, id)
	if err != nil {
		return err
	}
	if !withMem {
		return errorf(ErrNoAutoResume, "sandbox %s is paused without its memory, which traffic never resumes: resume it with connect", id)
	}
	if _, err := h.m.Resume(ctx, tenant, id); err != nil {
		if info, gerr := h.m.Get(ctx, tenant, id); gerr == nil && e2bState(info.State) == "running" {
			return nil // resumed meanwhile by another way in
		}
		return err
	}
	h.log.Info("e2b sandbox resumed by traffic", "id", id, "tenant", tenant)
	return nil
}
