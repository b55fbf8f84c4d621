package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hutch-sandbox/hutch/internal/store"
)

// cleanupLeftovers accounts for the sandboxes a previous daemon left: a
// sandbox paused to disk is kept, paused (keepDormant); every other
// record not stopped is stopped, and every directory without a live or
// dormant sandbox is removed. Warm sandboxes (tenant warmTenant, see pool.go) are ended the
// same way, and their records, which no tenant owns, are then deleted.
//
// A sandbox of this machine started to outlive its daemon (readopt.go)
// is taken again (reattach), and kept, if it still runs and can be. For
// the others: a sandbox whose PID 1 is gone (or whose pid now belongs to
// another process, told apart by its start time) only needs its record
// and directory cleaned up. One whose PID 1 still runs but cannot be
// taken again (its agent's connection went with the previous daemon, or
// it does not answer) is killed (SIGKILL to PID 1 ends its whole pid
// namespace).
func (m *Manager) cleanupLeftovers(ctx context.Context) error {
	rows, err := m.st.ListSandboxes(ctx, store.Filter{})
	if err != nil {
		return fmt.Errorf("recover sandboxes: %w", err)
	}
	keep := make(map[string]bool)
	var live map[string]string // the replicas alive, when there are
	if m.self() != "" {
		if live, err = m.liveReplicas(ctx, true); err != nil {
			return fmt.Errorf("recover sandboxes: %w", err)
		}
	}
	for _, sb := range rows {
		if m.remote(sb.Tier) != nil && sb.State != store.StateStopped && m.self() != "" && sb.Owner != m.self() {
			// Another replica's: left to it while it lives, taken over
			// if it is gone.
			if _, ok := live[sb.Owner]; !ok || sb.Owner == "" {
				took, err := m.takeOver(ctx, sb)
				if err != nil {
					m.log.Warn("take over a sandbox of a replica gone", "sandbox", sb.ID, "from", sb.Owner, "err", err)
				}
				sb = took
			}
			if sb.State != store.StateStopped {
				keep[sb.ID] = true
			}
			continue
		}
		// A remote runtime's sandbox runs on without the daemon: it is
		// taken again if it can be, and kept for a later try (a request
		// for it) if it is not gone but cannot be now.
		if rt := m.remote(sb.Tier); rt != nil && sb.State != store.StateStopped {
			_, err := m.reattach(ctx, remoteAttach{rt}, sb)
			if err == nil || !errors.Is(err, errGone) {
				if err != nil {
					m.log.Warn("a sandbox left running could not be taken again; a request for it tries again", "sandbox", sb.ID, "err", err)
				}
				keep[sb.ID] = true
				continue
			}
			m.log.Info("a sandbox left running is gone", "sandbox", sb.ID, "err", err)
		}
		// A sandbox of this machine left to outlive its daemon is taken
		// again if it can be, ended as a leftover if not.
		if m.remote(sb.Tier) == nil && sb.State == store.StateRunning && sb.Tenant != warmTenant && validID(sb.ID) && isLasting(filepath.Join(m.sbRoot, sb.ID)) {
			_, err := m.reattach(ctx, localAttach{}, sb)
			if err == nil {
				keep[sb.ID] = true
				continue
			}
			m.log.Warn("a sandbox left running could not be taken again: ending it", "sandbox", sb.ID, "err", err)
		}
		if sb.Checkpoint != "" && m.keepDormant(sb) {
			keep[sb.ID] = true
			continue
		}
		if sb.State != store.StateStopped && !m.reclaim(ctx, sb) {
			keep[sb.ID] = true
			continue
		}
		// A warm sandbox's record matters to no tenant once it is
		// stopped.
		if sb.Tenant == warmTenant {
			if err := m.st.DeleteSandbox(ctx, sb.ID); err != nil {
				m.log.Error("remove the record of a stopped warm sandbox", "sandbox", sb.ID, "err", err)
			}
		}
	}
	// What remote runtimes run for no sandbox taken again.
	for _, rt := range m.cfg.Runtimes {
		if r, ok := rt.(remoteRuntime); ok {
			// A pod of a live replica's with no record yet is one it is
			// starting.
			mine := func(replica string) bool { _, ok := live[replica]; return ok && replica != m.self() }
			if err := r.Sweep(ctx, func(id, replica string) bool { return keep[id] || mine(replica) }); err != nil {
				return fmt.Errorf("recover sandboxes on %s: %w", r.Remote(), err)
			}
		}
	}
	// Directories without a record (a daemon that died between making one
	// and recording it) or whose removal failed before.
	entries, err := os.ReadDir(m.sbRoot)
	if err != nil {
		return fmt.Errorf("recover sandboxes: %w", err)
	}
	for _, e := range entries {
		if keep[e.Name()] {
			continue
		}
		p := filepath.Join(m.sbRoot, e.Name())
		m.finishReview(p, m.log)
		if err := removeSandboxDir(p); err != nil {
			m.log.Error("remove leftover sandbox directory", "dir", p, "err", err)
		}
	}
	// What runtimes of this machine hold for the sandboxes ended above
	// (a gVisor sandbox's bundle, runsc's state, mounts).
	for _, rt := range m.cfg.Runtimes {
		if s, ok := rt.(sweeper); ok {
			s.Sweep(m.log)
		}
	}
	return nil
}

// reclaim ends the leftover sandbox sb and records it as stopped; it
// reports false if its PID 1 could not be ended (the record then stays as
// it is, for the next daemon to try again).
func (m *Manager) reclaim(ctx context.Context, sb store.Sandbox) bool {
	log := m.log.With("sandbox", sb.ID, "tenant", sb.Tenant, "pid", sb.PID)
	if validID(sb.ID) {
		// Its cgroup first: that ends a paused (frozen) sandbox as well,
		// and removes the cgroup's directories.
		endCgroup(sb.ID, log)
	}
	if sb.PID > 0 {
		killed, err := killProcess(sb.PID, sb.PIDStart, killTimeout)
		if err != nil {
			log.Error("end leftover sandbox", "err", err)
			return false
		}
		if killed {
			log.Warn("killed a sandbox of a previous daemon: its agent connection is gone")
		}
	}
	if validID(sb.ID) {
		dir := filepath.Join(m.sbRoot, sb.ID)
		if sb.Dir != dir {
			log.Warn("leftover sandbox recorded with another directory; removing its own", "recorded", sb.Dir, "dir", dir)
		}
		m.finishReview(dir, log)
		if err := removeSandboxDir(dir); err != nil {
			log.Error("remove leftover sandbox directory", "dir", dir, "err", err)
		}
	}
	if _, err := m.st.UpdateSandbox(ctx, sb.ID, func(sb *store.Sandbox) error {
		sb.State, sb.Checkpoint = store.StateStopped, ""
		return nil
	}); err != nil {
		log.Error("record leftover sandbox stopped", "err", err)
		return false
	}
	log.Info("leftover sandbox stopped")
	return true
}
