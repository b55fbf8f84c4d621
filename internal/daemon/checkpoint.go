package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// Pause to disk. A sandbox whose tier can save it (its instance is a
// checkpointer and its runtime a restorer: gVisor) is paused by writing
// it to disk and ending its processes, so that its memory is the host's
// again; it then exists as its record (paused, with a checkpoint), its
// directory and its event log only — a dormant sandbox, which survives
// the daemon: Close leaves it, the next daemon finds it (cleanupLeftovers)
// and Resume starts it again from there, its processes going on with
// their memory. A sandbox with secrets is paused in memory instead: their
// real values live in the daemon's memory only, and a later daemon could
// not serve its proxy.

// checkpointer is an instance that can be saved to disk, which ends it
// (*gvisor.served).
type checkpointer interface {
	// Checkpoint saves the sandbox in dir (made by it) and ends its
	// processes; on error the sandbox goes on, unless it ended (Done) or
	// the error wraps sandbox.ErrFrozen (it stays frozen until Thaw).
	Checkpoint(dir string) error
}

// restorer is a runtime that starts a sandbox again from what its
// checkpointer saved (*gvisor.Runtime).
type restorer interface {
	Restore(c sandbox.Config, dir string) (sandbox.Instance, error)
}

// layerKeeper is an instance whose root layer's tmpfs the daemon can read
// where the tier attached it (*gvisor.served): snapshots and diffs read
// what it wrote there.
type layerKeeper interface {
	// LayerDir is the directory ("" for none).
	LayerDir() string
}

// restoreCopy starts l, a new sandbox with cfg, as a copy of the source
// of snapshot sid, its memory saved (the live sandbox's SaveRunning), in
// runtime rt: its processes go on where the source's were. Its commands
// run with the source's environment, env over it, and as its user.
func (m *Manager) restoreCopy(l *live, rt sandbox.Runtime, cfg sandbox.Config, sid string, env []string) error {
	res, ok := rt.(restorer)
	if !ok {
		return fmt.Errorf("snapshot %s: tier %s cannot start a sandbox from its memory", sid, rt.Tier())
	}
	dir, release, err := m.holdMemory(sid)
	if err != nil {
		return err
	}
	defer release() // held while the tier reads it
	rs, err := readResume(dir)
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", sid, err)
	}
	si, err := res.Restore(cfg, dir)
	if err != nil {
		return fmt.Errorf("snapshot %s: start from its memory: %w", sid, err)
	}
	inst, ok := si.(instance)
	if !ok {
		_ = si.Close()
		return fmt.Errorf("tier %s: its sandboxes give no host pid to record", rt.Tier())
	}
	l.inst = inst
	l.execEnv, l.execUser = append(rs.Env, env...), rs.User
	client, err := agent.Attach(si.Conn())
	if err != nil {
		return endedWith(l, err)
	}
	l.attach(client)
	return nil
}

// dormant is a sandbox paused to disk.
type dormant struct {
	tenant  string
	expires time.Time
	// busy is set while the sandbox is being resumed or destroyed (under
	// Manager.mu).
	busy bool
	// release lets go of the image the sandbox started from, held in use
	// while it is paused (nil without one).
	release func()
	// What the sandbox's timeout does, and whether it was paused on it
	// (live's life, lifetime and autoPaused), also in its resumeState.
	life       Lifecycle
	lifetime   time.Duration
	autoPaused bool
}

// Names in a sandbox's directory.
const (
	checkpointDir = "checkpoint" // what the tier saved (Checkpoint)
	resumeFile    = "resume.json"
)

// detachTimeout bounds the wait for the agent to hand its connection
// over before a checkpoint.
const detachTimeout = 10 * time.Second

// resumeState is what the daemon keeps, beside the tier's checkpoint,
// to start a sandbox again: what its record does not say.
type resumeState struct {
	Operator bool `json:"operator,omitempty"`
	// FilesOnly: it was paused without its memory (PauseOptions).
	FilesOnly bool              `json:"files_only,omitempty"`
	Env       []string          `json:"env,omitempty"`
	User      *agent.Credential `json:"user,omitempty"`
	// Its Lifecycle, the timeout it was created with, and whether it
	// was paused on its timeout (dormant).
	Lifecycle  Lifecycle     `json:"lifecycle"`
	Lifetime   time.Duration `json:"lifetime,omitempty"`
	AutoPaused bool          `json:"auto_paused,omitempty"`
	// BootEnv is its agent's environment at its start (live's bootEnv).
	BootEnv []string `json:"boot_env,omitempty"`
}

// toDisk reports whether l is paused by saving it to disk: not with
// secrets, nor over a snapshot's layers, which its record does not name
// for a restore to stack (it is paused in memory then).
func (m *Manager) toDisk(l *live) bool {
	if _, ok := l.inst.(checkpointer); !ok || l.secrets || len(l.snapDirs) > 0 || !savesMemory(l.inst) {
		return false
	}
	_, ok := m.cfg.Runtimes[l.tier].(restorer)
	return ok
}

// pauseToDisk saves l, marked paused, to disk and ends its processes;
// it holds l.pauseMu. o.FilesOnly: its agent killed every other process
// first. On error the sandbox runs again (or, if it ended,
// is torn down), and the error says why.
func (m *Manager) pauseToDisk(ctx context.Context, l *live, o PauseOptions) (Info, error) {
	filesOnly := o.FilesOnly
	log := m.log.With("sandbox", l.id, "tenant", l.tenant)
	unpause := func() {
		m.mu.Lock()
		l.paused = false
		m.mu.Unlock()
	}
	sb, err := m.st.GetSandbox(ctx, "", l.id)
	if err != nil {
		unpause()
		return Info{}, fmt.Errorf("sandbox %s: pause: %w", l.id, err)
	}
	if err := m.checkDiskFor(sb); err != nil {
		unpause()
		return Info{}, fmt.Errorf("sandbox %s: pause: %w", l.id, err)
	}
	// The processes end on purpose from here: the watch stops first.
	close(l.unwatch)
	<-l.watched
	m.mu.Lock()
	stopping := l.stopping
	m.mu.Unlock()
	if stopping {
		unpause()
		return Info{}, fmt.Errorf("sandbox %s is stopping: %w", l.id, ErrConflict)
	}
	dctx, cancel := context.WithTimeout(ctx, detachTimeout)
	conn, err := l.client.Detach(dctx)
	cancel()
	if err != nil {
		unpause()
		m.end(l, "", fmt.Sprintf("its agent connection ended: %v", err))
		return Info{}, fmt.Errorf("sandbox %s: pause: %w", l.id, err)
	}
	m.unlast(l)
	dir := filepath.Join(l.dir, checkpointDir)
	start := time.Now()
	err = os.RemoveAll(dir) // what a failed attempt left
	if err == nil {
		err = l.inst.(checkpointer).Checkpoint(dir)
	}
	if err == nil {
		err = writeResume(dir, resumeState{Operator: l.operator, FilesOnly: filesOnly, Env: l.execEnv, User: l.execUser,
			Lifecycle: l.life, Lifetime: l.lifetime, AutoPaused: o.onTimeout, BootEnv: l.bootEnv})
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		select {
		case <-l.inst.Done():
			conn.Close()
			unpause()
			m.end(l, "", fmt.Sprintf("saving it to disk failed: %v", err))
			return Info{}, fmt.Errorf("sandbox %s: pause: %w (the sandbox ended)", l.id, err)
		default:
		}
		// It goes on as it was: a new session on the same connection
		// (the agent answers once it runs). Frozen, it stays paused in
		// memory, for Resume to thaw.
		frozen := errors.Is(err, sandbox.ErrFrozen)
		client, aerr := agent.Attach(conn)
		m.mu.Lock()
		if aerr == nil {
			l.attach(client)
		}
		l.paused, l.filesOnly = frozen, frozen && filesOnly
		m.mu.Unlock()
		if aerr != nil {
			m.end(l, "", fmt.Sprintf("its agent connection ended: %v", aerr))
		} else {
			m.startWatch(l)
		}
		if frozen {
			if _, uerr := m.st.UpdateSandbox(context.Background(), l.id, func(sb *store.Sandbox) error {
				sb.State = store.StatePaused
				return nil
			}); uerr != nil {
				log.Error("record sandbox paused", "err", uerr)
			}
			log.Warn("pause to disk failed; the sandbox stays paused in memory", "err", err)
			return Info{}, fmt.Errorf("sandbox %s: pause: saving it to disk: %w; it is paused in memory", l.id, err)
		}
		log.Warn("pause to disk failed; the sandbox runs on", "err", err)
		return Info{}, fmt.Errorf("sandbox %s: pause: saving it to disk: %w; it runs on", l.id, err)
	}
	saved := time.Since(start)
	conn.Close()
	// What is left of it on the host: the tier's state, its proxy.
	if err := l.inst.Close(); err != nil {
		log.Warn("close sandbox", "err", err)
	}
	countTraffic(l.proxy)
	last := time.Unix(0, l.lastActive.Load())
	row, err := m.st.UpdateSandbox(context.Background(), l.id, func(sb *store.Sandbox) error {
		if sb.State != store.StateRunning && sb.State != store.StatePaused {
			return fmt.Errorf("it is %s: %w", sb.State, ErrConflict)
		}
		sb.State, sb.Checkpoint = store.StatePaused, dir
		sb.PID, sb.PIDStart = 0, 0
		sb.LastActive = last
		return nil
	})
	if err != nil {
		// Nothing runs any more, and the record does not say where it
		// is saved: it ends.
		m.end(l, "", fmt.Sprintf("recording its checkpoint failed: %v", err))
		return Info{}, fmt.Errorf("sandbox %s: pause: %w", l.id, err)
	}
	m.mu.Lock()
	if m.live[l.id] == l {
		delete(m.live, l.id)
	}
	ending := l.stopping
	if !ending {
		m.dormant[l.id] = &dormant{tenant: l.tenant, expires: l.expires, release: l.release,
			life: l.life, lifetime: l.lifetime, autoPaused: o.onTimeout}
		l.release = nil
		l.stopping = true // nothing tears it down any more
	}
	m.mu.Unlock()
	if !ending {
		l.once.Do(func() { close(l.ended) })
	}
	data := map[string]any{"to": "disk"}
	if filesOnly {
		data["memory"] = false
	}
	if o.onTimeout {
		data["reason"] = "its timeout passed"
	}
	l.ev.append(EventPaused, data, false)
	log.Info("sandbox paused to disk", "dir", dir, "bytes", diskUsage(dir), "took", saved, "memory", !filesOnly)
	return infoOf(row), nil
}

// writeResume writes what the daemon needs to start the sandbox saved in
// dir again.
func writeResume(dir string, r resumeState) error { return writeJSONFile(dir, resumeFile, r) }

// readResume reads what writeResume wrote in dir.
func readResume(dir string) (resumeState, error) {
	var rs resumeState
	err := readJSONFile(dir, resumeFile, &rs)
	return rs, err
}

// writeJSONFile writes v, as JSON, to the file name of the sandbox
// directory dir, mode 0600: what a next daemon needs of the sandbox.
func writeJSONFile(dir, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name), b, 0o600)
}

// readJSONFile reads what writeJSONFile wrote to name in dir into v.
func readJSONFile(dir, name string, v any) error {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// checkDiskFor refuses a pause to disk of sandbox sb when the state
// directory's filesystem has less room than its checkpoint may take: its
// memory limit (gVisor saves the memory the sandbox uses, which the limit
// bounds) and its root layer's size.
func (m *Manager) checkDiskFor(sb store.Sandbox) error {
	var spec policy.Spec
	if err := json.Unmarshal(sb.Spec, &spec); err != nil {
		return fmt.Errorf("its policy: %w", err)
	}
	need := spec.Resources.MemoryBytes + spec.Resources.DiskBytes
	var st unix.Statfs_t
	if err := unix.Statfs(m.sbRoot, &st); err != nil {
		return fmt.Errorf("free space of %s: %w", m.sbRoot, err)
	}
	if free := int64(st.Bavail) * int64(st.Bsize); free < need {
		return fmt.Errorf("%s has %s free, and saving the sandbox may take up to %s (its memory limit and root size): %w",
			m.sbRoot, policy.FormatSize(free), policy.FormatSize(need), ErrUnavailable)
	}
	return nil
}

// diskUsage is the bytes the files below dir take on disk.
func diskUsage(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			var st unix.Stat_t
			if unix.Lstat(p, &st) == nil {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

// takeDormant marks tenant's dormant sandbox id ("" tenant: any) busy and
// returns it; ok is false when id is no dormant sandbox of tenant's.
func (m *Manager) takeDormant(tenant, id string) (d *dormant, ok bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d = m.dormant[id]
	if d == nil || (tenant != "" && d.tenant != tenant) {
		return nil, false, nil
	}
	if d.busy {
		return nil, true, fmt.Errorf("sandbox %s is being resumed or destroyed: %w", id, ErrConflict)
	}
	d.busy = true
	return d, true, nil
}

// resumeDormant starts tenant's sandbox id again from disk, if it is
// paused there (ok): where its processes were, or, paused without its
// memory or with o.Reboot, afresh over the files it kept (a tier that
// cannot start it so refuses).
func (m *Manager) resumeDormant(ctx context.Context, tenant, id string, o ResumeOptions) (info Info, ok bool, err error) {
	d, ok, err := m.takeDormant(tenant, id)
	if !ok || err != nil {
		return Info{}, ok, err
	}
	defer func() {
		m.mu.Lock()
		if err != nil {
			d.busy = false
		} else {
			delete(m.dormant, id)
		}
		m.mu.Unlock()
	}()
	sb, err := m.row(ctx, tenant, id)
	if err != nil {
		return Info{}, true, err
	}
	log := m.log.With("sandbox", id, "tenant", sb.Tenant)
	start := time.Now()
	ev := m.eventsOf("", id)
	if ev == nil {
		ev = m.newEvents(sb.Tenant, id)
	}
	l, cold, err := m.restore(ctx, sb, log, ev, o.Reboot)
	if err != nil {
		log.Warn("resume from disk failed; the sandbox stays paused", "err", err)
		return Info{}, true, fmt.Errorf("sandbox %s: resume: %w", id, err)
	}
	now := time.Now()
	if err := m.adopt(l, sb.Tenant, sb.IdleTimeout, now, d.expires); err != nil {
		l.close(log)
		return Info{}, true, fmt.Errorf("sandbox %s: resume: %w", id, err)
	}
	l.release, d.release = d.release, nil
	m.mu.Lock()
	l.life, l.lifetime, l.autoPaused = d.life, d.lifetime, d.autoPaused
	m.mu.Unlock()
	m.relive(l)
	row, err := m.st.UpdateSandbox(context.Background(), id, func(sb *store.Sandbox) error {
		sb.State, sb.Checkpoint, sb.LastActive = store.StateRunning, "", now
		return nil
	})
	if err != nil {
		<-m.end(l, "", "recording it failed")
		return Info{}, true, fmt.Errorf("sandbox %s: resume: %w", id, err)
	}
	if err := os.RemoveAll(sb.Checkpoint); err != nil {
		log.Warn("remove the checkpoint", "dir", sb.Checkpoint, "err", err)
	}
	data := map[string]any{"from": "disk"}
	if cold {
		data["boot"] = "cold"
	}
	ev.append(EventResumed, data, false)
	log.Info("sandbox resumed from disk", "pid", l.inst.PID(), "took", time.Since(start), "cold", cold)
	return infoOf(row), true, nil
}

// restore starts sandbox sb, paused to disk, again: its proxy, its root
// (its image's layers, held in use), the tier's restore (or, cold: paused
// without its memory, or reboot, its start afresh over the files it
// kept), a new session with its agent. The live it returns belongs to no
// tenant yet; on error everything started is closed again.
func (m *Manager) restore(ctx context.Context, sb store.Sandbox, log *slog.Logger, ev *eventLog, reboot bool) (l *live, cold bool, err error) {
	var spec policy.Spec
	if err := json.Unmarshal(sb.Spec, &spec); err != nil {
		return nil, false, fmt.Errorf("its policy: %w", err)
	}
	rs, err := readResume(sb.Checkpoint)
	if err != nil {
		return nil, false, err
	}
	rt, err := m.runtime(sb.Tier)
	if err != nil {
		return nil, false, err
	}
	res, ok := rt.(restorer)
	if !ok {
		return nil, false, fmt.Errorf("tier %s cannot start a sandbox saved to disk", sb.Tier)
	}
	cold = rs.FilesOnly || reboot
	boot, canBoot := rt.(rebooter)
	if cold && !canBoot {
		return nil, false, fmt.Errorf("tier %s cannot start a sandbox saved to disk afresh: %w", sb.Tier, ErrUnsupported)
	}
	l, err = m.restoreLive(ctx, sb, spec, rs, log, ev, func(c sandbox.Config) (sandbox.Instance, error) {
		if cold {
			return boot.Reboot(c, sb.Checkpoint)
		}
		return res.Restore(c, sb.Checkpoint)
	}, cold)
	return l, cold, err
}

// rebooter is a runtime that starts a sandbox its checkpointer saved
// afresh, over the files it kept, ignoring its memory (*gvisor.Runtime).
type rebooter interface {
	Reboot(c sandbox.Config, dir string) (sandbox.Instance, error)
}

// restoreLive is restore's start of sb, with rs and spec read, by start;
// fresh: start booted the sandbox afresh, whose agent speaks to a new
// client (not one that goes on where the saved one was).
func (m *Manager) restoreLive(ctx context.Context, sb store.Sandbox, spec policy.Spec, rs resumeState, log *slog.Logger, ev *eventLog,
	start func(sandbox.Config) (sandbox.Instance, error), fresh bool) (*live, error) {
	var err error
	l := &live{id: sb.ID, dir: sb.Dir, ev: ev, ended: make(chan struct{}), image: sb.Image, tier: sb.Tier,
		operator: rs.Operator, execEnv: rs.Env, execUser: rs.User, resources: spec.Resources, bootEnv: rs.BootEnv}
	fail := func(err error) (*live, error) {
		l.close(log)
		return nil, err
	}
	var env []string // a restored sandbox's is in its memory
	if fresh {
		env = rs.BootEnv
	}
	layer := m.rootLayer(spec)
	if sb.Image != "" {
		var release func()
		if _, _, layer, release, err = m.imageLayer(sb.Image, spec); err != nil {
			return nil, err
		}
		release() // the dormant sandbox holds the image (resumeDormant)
	}
	l.interp = HasKernels(layer.Lowers)
	vols, err := decodeVolumes(sb.Volumes)
	if err != nil {
		return nil, err
	}
	if l.gate, err = m.newGate(sb.ID, spec, log); err != nil {
		return nil, err
	}
	proxy, err := newProxy(spec.Network, m.cfg.AllowPrivate, rs.Operator, sb.ID, log, ev, nil)
	if err != nil {
		return nil, err
	}
	l.holdUnknown(proxy)
	l.proxy = proxy
	l.volumes = len(vols) > 0
	si, err := start(sandbox.Config{
		Spec:        spec,
		Environ:     env,
		Log:         log,
		Proxy:       proxy,
		RootLayer:   layer,
		AgentBinary: m.agentBinary(l),
		RootCaps:    true,
		Cgroup:      true,
		CgroupName:  sandboxCgroupPrefix + sb.ID,
		Volumes:     toSandboxVolumes(vols), // the record's: shown again where they were
		HostDir:     sb.Dir,
	})
	if err != nil {
		_ = proxy.Close()
		return nil, err
	}
	inst, ok := si.(instance)
	if !ok {
		_ = si.Close()
		return nil, fmt.Errorf("tier %s: its sandboxes give no host pid to record", sb.Tier)
	}
	l.inst = inst
	if k, ok := inst.(layerKeeper); ok {
		l.keep = k.LayerDir()
	}
	var c *agent.Client
	if fresh {
		c = agent.NewClient(si.Conn())
	} else if c, err = agent.Attach(si.Conn()); err != nil {
		return fail(endedWith(l, err))
	}
	l.attach(c)
	if err := m.recordReady(ctx, sb.ID, l, nil); err != nil {
		return fail(err)
	}
	if fresh {
		if err := startInterpreter(ctx, l, log); err != nil {
			return fail(err)
		}
	}
	return l, nil
}

// destroyDormant destroys tenant's sandbox id if it is paused to disk
// (ok): its checkpoint and directory go, its record is stopped.
func (m *Manager) destroyDormant(ctx context.Context, tenant, id string) (ok bool, err error) {
	d, ok, err := m.takeDormant(tenant, id)
	if !ok || err != nil {
		return ok, err
	}
	m.forget(id, d, EventDestroyed, "destroyed")
	return true, nil
}

// forget ends dormant sandbox id, taken (busy): kind (an event type) and
// why say why.
func (m *Manager) forget(id string, d *dormant, kind, why string) {
	log := m.log.With("sandbox", id, "tenant", d.tenant)
	ev := m.eventsOf("", id)
	if ev == nil {
		ev = m.newEvents(d.tenant, id)
	}
	ev.append(kind, map[string]any{"reason": why}, false)
	if d.release != nil {
		d.release()
	}
	dir := filepath.Join(m.sbRoot, id)
	if err := os.RemoveAll(dir); err != nil {
		log.Error("remove sandbox directory", "dir", dir, "err", err)
	}
	if _, err := m.st.UpdateSandbox(context.Background(), id, func(sb *store.Sandbox) error {
		sb.State, sb.Checkpoint = store.StateStopped, ""
		return nil
	}); err != nil {
		log.Error("record sandbox stopped", "err", err)
	}
	m.mu.Lock()
	delete(m.dormant, id)
	m.mu.Unlock()
	m.dropUsage(id)
	m.endEvents(id, ev, why)
	log.Info("sandbox paused to disk ended", "reason", why)
}

// extendDormant sets tenant's sandbox id, if it is paused to disk (ok),
// to expire timeout from now.
func (m *Manager) extendDormant(ctx context.Context, tenant, id string, timeout time.Duration) (info Info, ok bool, err error) {
	d, ok, err := m.takeDormant(tenant, id)
	if !ok || err != nil {
		return Info{}, ok, err
	}
	expires := time.Now().Add(timeout)
	sb, err := m.st.UpdateSandbox(ctx, id, func(sb *store.Sandbox) error {
		sb.Expires = expires
		return nil
	})
	m.mu.Lock()
	d.busy = false
	if err == nil {
		d.expires = expires
	}
	m.mu.Unlock()
	if err != nil {
		return Info{}, true, fmt.Errorf("sandbox %s: extend: %w", id, err)
	}
	return infoOf(sb), true, nil
}

// reapDormant ends the sandboxes paused to disk whose timeout passed at
// now: the timeout runs while a sandbox is paused, on disk as in memory.
func (m *Manager) reapDormant(now time.Time) {
	var due []string
	m.mu.Lock()
	for id, d := range m.dormant {
		if !d.busy && !d.expires.IsZero() && !now.Before(d.expires) {
			d.busy = true
			due = append(due, id)
		}
	}
	m.mu.Unlock()
	for _, id := range due {
		m.mu.Lock()
		d := m.dormant[id]
		m.mu.Unlock()
		m.forget(id, d, EventTimeout, "its timeout passed")
	}
}

// keepDormant takes sb, a record a previous daemon left paused to disk,
// as a dormant sandbox of m's (cleanupLeftovers); false if its checkpoint
// is gone, and the sandbox with it.
func (m *Manager) keepDormant(sb store.Sandbox) bool {
	if sb.State != store.StatePaused || sb.Checkpoint == "" || !validID(sb.ID) ||
		filepath.Dir(sb.Checkpoint) != filepath.Join(m.sbRoot, sb.ID) {
		return false
	}
	if _, err := os.Stat(filepath.Join(sb.Checkpoint, resumeFile)); err != nil {
		return false
	}
	d := &dormant{tenant: sb.Tenant, expires: sb.Expires}
	if rs, err := readResume(sb.Checkpoint); err == nil {
		d.life, d.lifetime, d.autoPaused = rs.Lifecycle, rs.Lifetime, rs.AutoPaused
	}
	if sb.Image != "" {
		// Held in use while it is paused, as while it ran: an image
		// gone since is the resume's error.
		var spec policy.Spec
		if json.Unmarshal(sb.Spec, &spec) == nil {
			if _, _, _, release, err := m.imageLayer(sb.Image, spec); err == nil {
				d.release = release
			} else {
				m.log.Warn("the image of a sandbox paused to disk", "sandbox", sb.ID, "image", sb.Image, "err", err)
			}
		}
	}
	m.mu.Lock()
	m.dormant[sb.ID] = d
	m.mu.Unlock()
	m.log.Info("sandbox paused to disk kept", "sandbox", sb.ID, "tenant", sb.Tenant)
	return true
}
