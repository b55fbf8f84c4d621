package daemon

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/egress"
	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/secrets"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// Bounds of a CreateRequest's labels and environment (CheckLabels,
// CheckEnv).
const (
	MaxLabels     = 64
	MaxLabelKey   = 128
	MaxLabelValue = 512
	MaxEnvVars    = 256
	MaxEnvBytes   = 128 << 10
)

// defaultPath is the commands' PATH unless the policy or the request sets
// one.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// idPrefix starts every sandbox ID; idChars random characters of
// idAlphabet follow it (60 bits).
const (
	idPrefix   = "sb-"
	idChars    = 12
	idAlphabet = "abcdefghijklmnopqrstuvwxyz234567"
)

var idEncoding = base32.NewEncoding(idAlphabet).WithPadding(base32.NoPadding)

// newID returns a new random sandbox ID.
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return idPrefix + idEncoding.EncodeToString(b[:])[:idChars]
}

// validID reports whether id has the form newID gives, so that it can name
// a directory.
func validID(id string) bool {
	rest, ok := strings.CutPrefix(id, idPrefix)
	if !ok || len(rest) != idChars {
		return false
	}
	for _, c := range rest {
		if !strings.ContainsRune(idAlphabet, c) {
			return false
		}
	}
	return true
}

// invalid is an error of category ErrInvalid.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrInvalid)
}

// Create starts a sandbox for tenant.
func (m *Manager) Create(ctx context.Context, tenant string, r CreateRequest) (Info, error) {
	if err := m.enter(); err != nil {
		return Info{}, err
	}
	defer m.leave()
	if tenant == "" {
		return Info{}, invalid("create sandbox: no tenant")
	}
	if err := CheckLabels("create sandbox: labels", r.Labels); err != nil {
		return Info{}, err
	}
	if err := CheckEnv("create sandbox: env", r.Env); err != nil {
		return Info{}, err
	}
	if r.IdleTimeout < 0 {
		return Info{}, invalid("create sandbox: negative idle timeout %s", r.IdleTimeout)
	}

	if tenant == warmTenant {
		return Info{}, invalid("create sandbox: the tenant name %q is reserved", tenant)
	}
	if ref, ok := r.Policy.Image(); ok {
		_, err := m.images.Get(ref)
		ImageCache.With("create", CacheResult(err == nil)).Inc()
	}
	var upstream *x509.CertPool // the daemon's roots, unless the request adds some
	if len(r.UpstreamCA) > 0 {
		var err error
		if upstream, err = withUpstreamCA(m.cfg.UpstreamRoots, r.UpstreamCA); err != nil {
			return Info{}, err
		}
	}
	var snap *store.Snapshot
	if r.Snapshot != "" {
		var err error
		if snap, err = m.snapshotBase(ctx, tenant, &r); err != nil {
			return Info{}, err
		}
	} else if p := m.warmPool(r); p != nil && len(r.Volumes) == 0 {
		// What the request asks beyond the pool's policy (its lifecycle)
		// is checked against the tier as for a cold start.
		if err := tierAllows(p.key.Tier, r, nil); err != nil {
			return Info{}, err
		}
		if info, ok, err := m.takeWarm(ctx, p, tenant, r); ok || err != nil {
			return info, err
		}
	}

	// After the snapshot's policy is the request's: its workspace.
	if err := checkVolumes(r.Volumes, workspaceOf(r.Policy)); err != nil {
		return Info{}, err
	}
	vols, err := encodeVolumes(r.Volumes)
	if err != nil {
		return Info{}, err
	}
	spec, timeout, err := m.prepare(r, workspaceOf(r.Policy))
	if err != nil {
		return Info{}, err
	}
	if err := tierAllows(spec.Tier, r, snap); err != nil {
		return Info{}, err
	}
	if err := m.checkRemote(r, spec); err != nil {
		return Info{}, err
	}
	review, err := m.bindReview(tenant, r, spec)
	if err != nil {
		return Info{}, err
	}
	if review != nil {
		// Until the sandbox runs, a failure takes its change set along.
		defer func() {
			if !review.running {
				m.mu.Lock()
				delete(m.reviewing, review.set.ID())
				delete(m.setOf, review.set.Meta().Sandbox)
				m.mu.Unlock()
				m.reviewMu.Lock()
				_ = m.changes.Discard(review.set.ID())
				m.reviewMu.Unlock()
			}
		}()
	}
	sec, err := loadSecrets(spec, r.Secrets)
	if err != nil {
		return Info{}, err
	}
	if sec != nil {
		sec.upstream = upstream
	}
	env, err := sec.env(environ(spec.Env, r.Env))
	if err != nil {
		return Info{}, err
	}

	now := time.Now()
	row := store.Sandbox{
		Tenant:      tenant,
		Labels:      r.Labels,
		Notes:       maps.Clone(r.Notes),
		Created:     now,
		Expires:     now.Add(timeout),
		LastActive:  now,
		IdleTimeout: r.IdleTimeout,
		Volumes:     vols,
	}
	if err := m.record(ctx, &row, spec); err != nil {
		return Info{}, err
	}
	id, dir := row.ID, row.Dir
	log := m.log.With("sandbox", id, "tenant", tenant)
	if review != nil {
		if err := review.set.Own(tenant, id, review.name); err != nil {
			m.abandon(id, dir, log, nil, err)
			return Info{}, fmt.Errorf("create sandbox %s: %w", id, err)
		}
	}
	ev := m.newEvents(tenant, id)
	ev.append(EventCreated, map[string]any{"expires": row.Expires, "tier": spec.Tier}, false)

	l, err := m.launch(ctx, id, dir, spec, env, sec, r.Operator, log, ev, snap, review, r.Volumes)
	if err != nil {
		m.abandon(id, dir, log, ev, err)
		if errors.Is(err, sandbox.ErrVolumePath) {
			// The request's path, in the root it asked for.
			return Info{}, invalid("create sandbox %s: volumes: %v", id, err)
		}
		if errors.Is(err, sandbox.ErrNotDirInRoot) {
			// The host's root changed since prepare looked.
			return Info{}, invalid("create sandbox %s: policy: filesystem.workspace: %v", id, err)
		}
		return Info{}, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	l.life, l.lifetime = r.Lifecycle, timeout
	m.keepLife(l)
	if err := m.adopt(l, tenant, r.IdleTimeout, now, row.Expires); err != nil {
		l.close(log)
		m.abandon(id, dir, log, ev, err)
		return Info{}, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	sb, err := m.markRunning(id)
	if err != nil {
		<-m.end(l, "", "recording it failed")
		return Info{}, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	ev.append(EventStarted, nil, false)
	SandboxesCreated.With(sb.Tier).Inc()
	log.Info("sandbox started", "pid", l.inst.PID(), "expires", row.Expires, "image", l.image, "tier", sb.Tier)
	info := infoOf(sb)
	if review != nil {
		review.running, info.ChangeSet = true, review.set.ID()
	}
	return info, nil
}

// launch starts sandbox id — its record made (starting) and its directory
// ready — with spec and env as its agent's environment (with the
// placeholders of sec, the spec's secrets, nil for none; spec the
// operator's when operator, else a tenant's), records the host
// pid of its PID 1 and waits for its agent to answer. It is how every
// sandbox starts, created or warm. The live it returns belongs to no
// tenant yet and is not in m.live; ev (may be nil) gets its proxy's
// refusals; snap, when set, is the snapshot it starts from. On error
// everything started is closed again; the caller cleans up the record and
// the directory (abandon). vols are the host directories shown in it
// (CreateRequest.Volumes, checked).
func (m *Manager) launch(ctx context.Context, id, dir string, spec policy.Spec, env []string, sec *sandboxSecrets, operator bool, log *slog.Logger, ev *eventLog, snap *store.Snapshot, review *reviewBinding, vols []Volume) (*live, error) {
	if rt := m.remote(spec.Tier); rt != nil {
		return m.launchRemote(ctx, rt, id, dir, spec, env, log, ev)
	}
	l := &live{id: id, dir: dir, ev: ev, ended: make(chan struct{}), resources: spec.Resources, volumes: len(vols) > 0}
	fail := func(err error) (*live, error) {
		l.close(log)
		return nil, err
	}
	layer := m.rootLayer(spec)
	var img *image.Image
	var user image.User
	if ref, ok := spec.Image(); ok {
		var err error
		if img, user, layer, l.release, err = m.imageLayer(ref, spec); err != nil {
			return nil, err
		}
		env = imageEnv(imageUserEnv(img, user), env, spec.Env)
		l.image, l.imageDirs = img.Digest, slices.Clone(layer.Lowers)
	}
	l.root = spec.Root
	if snap != nil {
		if l.image != snap.Image {
			return fail(fmt.Errorf("snapshot %s: its base image %s is no longer %s: %w", snap.ID, snap.Image, spec.Root, ErrConflict))
		}
		dirs, release, err := m.holdLayers(snap.Layers)
		if err != nil {
			return fail(err)
		}
		l.release = chain(l.release, release)
		if len(layer.Lowers) > 0 {
			// Over an image: the snapshot's layers stacked on its own.
			layer.Lowers = append(layer.Lowers, dirs...)
			l.snapDirs = dirs
			l.snapLayers, l.snapSize = snap.Layers, snap.Size
		} else {
			// Over the host's root, which holds the snapshot store:
			// overlayfs stacks no layer that lies below another, so
			// the new layer starts as a copy of the snapshot's (one
			// layer: a snapshot of such a sandbox holds it all).
			layer.FromSnapshot = dirs[len(dirs)-1]
		}
	}
	if snap != nil && len(layer.Lowers) > 0 && spec.Tier == policy.TierMicroVM && !fromMemory(snap, spec.Tier, len(vols)) {
		// A guest boots from one EROFS root: the image's layers and
		// the snapshot's.
		var err error
		if layer.EROFS, err = m.snapshotEROFS(ctx, snap, layer.Lowers, layer.EROFS); err != nil {
			return fail(err)
		}
	}
	l.interp = HasKernels(layer.Lowers)
	if spec.Tier == policy.TierNamespace {
		// The layer's tmpfs is attached in the sandbox's directory too,
		// for snapshots to copy what it wrote.
		l.keep = filepath.Join(dir, keepDir)
		if err := os.Mkdir(l.keep, 0o700); err != nil {
			return fail(err)
		}
		layer.Keep = l.keep
	}
	var err error
	if l.gate, err = m.newGate(id, spec, log); err != nil {
		return fail(err)
	}
	var proxy sandbox.Proxy
	if spec.Network.Mode == "proxy" || spec.Network.Mode == "none" {
		// In mode "none" the proxy refuses everything: the sandbox's
		// clients fail at once, and its events say where they meant to go.
		p, err := newProxy(spec.Network, m.cfg.AllowPrivate, operator, id, log, ev, sec.secrets())
		if err != nil {
			return fail(err)
		}
		l.holdUnknown(p)
		proxy, l.proxy = p, p
		if sec != nil {
			if err := sec.intercept(p, id, dir, m.cfg.UpstreamRoots); err != nil {
				return fail(err)
			}
		}
	}
	rt, err := m.runtime(spec.Tier)
	if err != nil {
		return fail(err)
	}
	l.operator, l.secrets, l.tier, l.bootEnv = operator, sec != nil, spec.Tier, env
	bootID := filepath.Join(dir, bootIDFile)
	if err := writeBootID(bootID); err != nil {
		return fail(err)
	}
	cfg := sandbox.Config{
		Spec:        spec,
		BootID:      bootID,
		Environ:     env,
		Log:         log,
		Proxy:       proxy,
		RootLayer:   layer,
		CABundle:    sec.caBundle(),
		AgentBinary: m.agentBinary(l),
		RootCaps:    true,
		Wipe:        sec.values(),
		Cgroup:      true,
		CgroupName:  sandboxCgroupPrefix + id,
		Volumes:     toSandboxVolumes(vols),
		HostDir:     dir,
	}
	if review != nil {
		if err := startReview(dir, review, spec.Resources.DiskBytes, &cfg); err != nil {
			return fail(err)
		}
		m.mu.Lock()
		m.reviewing[review.set.ID()] = filepath.Join(dir, reviewDir, "upper")
		m.setOf[id] = review.set.ID()
		m.mu.Unlock()
	}
	fresh := true // its processes start now (not from a saved memory)
	if fromMemory(snap, spec.Tier, len(vols)) {
		fresh = false
		// A copy of the snapshot's source, going on from its memory.
		if err := m.restoreCopy(l, rt, cfg, snap.ID, env); err != nil {
			return fail(err)
		}
		if exportsLayer(l.inst) {
			// Its layer, in its memory, holds all it and its source
			// wrote over the image: a snapshot of it is that layer
			// alone.
			l.snapLayers, l.snapSize, l.snapDirs = nil, 0, nil
		}
	} else {
		if img != nil && img.Config.User != "" {
			l.execUser = &agent.Credential{UID: uint32(user.UID), GID: uint32(user.GID)}
		}
		if lastingOK(rt, spec, sec, review, snap) {
			if err := makeLasting(dir, l, &cfg); err != nil {
				return fail(err)
			}
		}
		inst, conn, err := startSandbox(rt, cfg)
		if err != nil {
			return fail(err)
		}
		l.inst = inst
		if h, ok := inst.(handled); ok && cfg.AgentSocket != "" {
			if err := updateLasting(dir, func(ls *lasting) { ls.Handle = h.Handle() }); err != nil {
				conn.Close()
				return fail(fmt.Errorf("sandbox directory: %w", err))
			}
		}
		l.attach(agent.NewClient(conn))
	}
	if k, ok := l.inst.(layerKeeper); ok && l.keep == "" {
		l.keep = k.LayerDir()
	}
	// Recorded at once, so that a daemon started after this one died can
	// find the sandbox's PID 1 even if it died before the sandbox ran;
	// the image's digest with it, which the sandbox's record keeps for
	// its life and after.
	if err := m.recordReady(ctx, id, l, func(sb *store.Sandbox) { sb.Image = l.image }); err != nil {
		return fail(err)
	}
	if fresh {
		if err := startInterpreter(ctx, l, log); err != nil {
			return fail(err)
		}
	}
	return l, nil
}

// recordReady records the host pid (and its start time) of what holds
// l's sandbox in record id, with what more also sets, and waits for its
// agent to answer: the end of a start, or of a restore.
func (m *Manager) recordReady(ctx context.Context, id string, l *live, more func(*store.Sandbox)) error {
	// A remote sandbox (PID 0) has no process here to record.
	pid, pidStart := l.inst.PID(), uint64(0)
	if pid != 0 {
		var err error
		if pidStart, err = processStart(pid); err != nil {
			return fmt.Errorf("PID 1 (host pid %d): %w", pid, err)
		}
	}
	if _, err := m.st.UpdateSandbox(context.Background(), id, func(sb *store.Sandbox) error {
		sb.PID, sb.PIDStart = pid, pidStart
		if more != nil {
			more(sb)
		}
		return nil
	}); err != nil {
		return err
	}
	if err := agentAnswers(ctx, l); err != nil {
		return endedWith(l, err)
	}
	return nil
}

// endedWith adds to err, an error of l's agent connection, why l's
// sandbox ended, if it did (or does within endReasonWait): a sandbox that
// ends as it starts or is restored (runsc failed) shows only as its
// agent's connection closing — reset, if what the daemon sent was still
// unread — which says nothing of why.
func endedWith(l *live, err error) error {
	select {
	case <-l.inst.Done():
	case <-time.After(endReasonWait):
		return err
	}
	if r, ok := l.inst.(endReasoner); ok {
		if why, _ := r.EndReason(); why != "" {
			return fmt.Errorf("%w; the sandbox ended: %s", err, why)
		}
	}
	return fmt.Errorf("%w; the sandbox ended", err)
}

// agentAnswers waits, within readyTimeout, for l's agent to answer a
// request.
func agentAnswers(ctx context.Context, l *live) error {
	rctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if _, err := l.client.ListProcesses(rctx); err != nil {
		return fmt.Errorf("the agent did not answer: %w", err)
	}
	return nil
}

// close ends what launch started of l, for a sandbox that never ran for
// a tenant: its agent connection, its PID 1 and its proxy.
func (l *live) close(log *slog.Logger) {
	if l.client != nil {
		l.client.Close()
	}
	if l.inst != nil {
		if err := l.inst.Close(); err != nil {
			log.Warn("close sandbox", "err", err)
		}
	}
	if l.release != nil {
		l.release()
		l.release = nil
	}
	countTraffic(l.proxy)
}

// abandon cleans up after sandbox id failed to start (err): it removes its
// directory, records it as stopped and ends its event log (ev may be nil).
func (m *Manager) abandon(id, dir string, log *slog.Logger, ev *eventLog, err error) {
	if rerr := removeSandboxDir(dir); rerr != nil {
		log.Error("remove sandbox directory", "dir", dir, "err", rerr)
	}
	if _, uerr := m.st.UpdateSandbox(context.Background(), id, func(sb *store.Sandbox) error {
		sb.State = store.StateStopped
		return nil
	}); uerr != nil {
		log.Error("record sandbox stopped", "err", uerr)
	}
	log.Info("sandbox failed to start", "err", err)
	m.endEvents(id, ev, "it failed to start")
}

// adopt makes l, just started or taken from the warm pool, tenant's
// sandbox — active at now, expiring at expires, with idle timeout idle —
// and watches it; it fails, leaving l to the caller, once the manager is
// closed.
func (m *Manager) adopt(l *live, tenant string, idle time.Duration, now, expires time.Time) error {
	l.tenant = tenant
	l.idle = idle
	l.expires = expires
	l.lastActive.Store(now.UnixNano())
	l.flushed, l.flushedAt = now.UnixNano(), now
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return errClosed()
	}
	m.live[l.id] = l
	m.mu.Unlock()
	m.startWatch(l)
	return nil
}

// markRunning records sandbox id, which was starting, as running.
func (m *Manager) markRunning(id string) (store.Sandbox, error) {
	return m.st.UpdateSandbox(context.Background(), id, func(sb *store.Sandbox) error {
		if sb.State != store.StateStarting {
			return fmt.Errorf("it is %s", sb.State)
		}
		sb.State = store.StateRunning
		return nil
	})
}

// record completes row, the record of a new sandbox of spec — its ID, its
// directory (made here), its state (starting) and its policy — and inserts
// it; a tenant's within its quota, a warm one's (warmTenant) without.
func (m *Manager) record(ctx context.Context, row *store.Sandbox, spec policy.Spec) error {
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("create sandbox: encode policy: %w", err)
	}
	row.ID = newID()
	row.Owner = m.self()
	row.Dir = filepath.Join(m.sbRoot, row.ID)
	row.State = store.StateStarting
	row.Spec = specJSON
	row.Tier = spec.Tier
	if err := os.Mkdir(row.Dir, 0o700); err != nil {
		return fmt.Errorf("create sandbox: %w", err)
	}
	insert := func() error {
		if err := m.st.InsertSandbox(ctx, *row); err != nil {
			return fmt.Errorf("create sandbox: %w", err)
		}
		return nil
	}
	if row.Tenant == warmTenant {
		err = insert()
	} else {
		err = m.withQuota(ctx, row.Tenant, spec.Resources.MemoryBytes, insert)
	}
	if err != nil {
		os.RemoveAll(row.Dir)
	}
	return err
}

// withQuota runs add, which records a new sandbox of tenant with a memory
// limit of memory bytes, if the tenant's quota allows it: the check and
// the new record are one step, so that concurrent creates cannot overrun
// the quota.
func (m *Manager) withQuota(ctx context.Context, tenant string, memory int64, add func() error) error {
	m.quotaMu.Lock()
	defer m.quotaMu.Unlock()
	if err := m.quota(ctx, tenant, memory); err != nil {
		return err
	}
	return add()
}

// quota checks, under quotaMu, that tenant may have one more sandbox, with
// a memory limit of memory bytes.
func (m *Manager) quota(ctx context.Context, tenant string, memory int64) error {
	n, err := m.st.CountSandboxes(ctx, tenant)
	if err != nil {
		return fmt.Errorf("create sandbox: %w", err)
	}
	if n >= m.cfg.MaxSandboxes {
		return fmt.Errorf("create sandbox: tenant %s has %d sandboxes, the most allowed: %w", tenant, n, ErrQuota)
	}
	if m.cfg.TenantMemory <= 0 {
		return nil
	}
	if memory <= 0 {
		return invalid("create sandbox: policy: resources.memory: required, the tenants' memory is bounded")
	}
	used, err := m.st.MemoryOf(ctx, tenant)
	if err != nil {
		return fmt.Errorf("create sandbox: %w", err)
	}
	if used+memory > m.cfg.TenantMemory {
		return fmt.Errorf("create sandbox: tenant %s has sandboxes with %s of memory; %s more exceeds its quota of %s: %w",
			tenant, policy.FormatSize(used), policy.FormatSize(memory), policy.FormatSize(m.cfg.TenantMemory), ErrQuota)
	}
	return nil
}

// prepare returns the policy of a new sandbox for r, whose workspace is ws
// (a directory of the sandbox's writable root, made there when it starts),
// and its lifetime.
func (m *Manager) prepare(r CreateRequest, ws string) (policy.Spec, time.Duration, error) {
	spec := clonePolicy(r.Policy)
	spec.Filesystem.Workspace = ws
	m.resolveTier(&spec)
	if err := spec.Normalize(ws, ""); err != nil {
		return spec, 0, invalid("create sandbox: policy: %s", oneLine(err))
	}
	// Before the rest: a tier the daemon refuses is the answer, whatever
	// else the policy asks for.
	if err := m.checkTier(spec.Tier); err != nil {
		return spec, 0, err
	}
	if r.Policy.Resources.TmpBytes == 0 {
		spec.Resources.TmpBytes = min(spec.Resources.TmpBytes, m.cfg.MaxTmp)
	}
	if err := servePolicy(spec, m.cfg.NoInternet); err != nil {
		return spec, 0, fmt.Errorf("create sandbox: %w", err)
	}
	if !r.Operator {
		if err := m.tenantNetwork(spec); err != nil {
			return spec, 0, fmt.Errorf("create sandbox: %w", err)
		}
	}
	if spec.Resources.DiskBytes == 0 {
		spec.Resources.DiskBytes = m.cfg.DefaultDisk
	}
	if spec.Resources.MemoryBytes == 0 {
		spec.Resources.MemoryBytes = m.cfg.DefaultMemory
	}

	// Each is RAM the host holds for the sandbox (its memory limit, and
	// tmpfs mounts charged to it): bounded by the operator.
	for _, b := range []struct {
		field, flag string
		size, max   int64
	}{
		{"resources.disk", "--max-disk", spec.Resources.DiskBytes, m.cfg.MaxDisk},
		{"resources.memory", "--max-memory", spec.Resources.MemoryBytes, m.cfg.MaxMemory},
		{"resources.tmp_size", "--max-tmp-size", spec.Resources.TmpBytes, m.cfg.MaxTmp},
	} {
		if b.size > b.max {
			return spec, 0, invalid("create sandbox: policy: %s: %s is above the maximum of %s (hutch serve %s)", b.field, policy.FormatSize(b.size), policy.FormatSize(b.max), b.flag)
		}
	}
	timeout, err := m.lifetime(r.Timeout, spec.Resources.Timeout)
	if err != nil {
		return spec, 0, err
	}
	// The workspace is made in the sandbox's own root layer, not on the
	// host: it is checked as if it were an existing directory.
	check := spec
	check.Filesystem.Workspace = m.sbRoot
	if err := check.Validate(); err != nil {
		return spec, 0, invalid("create sandbox: policy: %s", oneLine(err))
	}
	if spec.Filesystem.WorkspaceMode == policy.WorkspaceReview {
		return spec, 0, invalid("create sandbox: policy: filesystem.workspace_mode: %q is hutch run's (--review): a served sandbox's workspace is in its own root layer, nothing of the host's to keep unchanged", policy.WorkspaceReview)
	}
	switch {
	case !filepath.IsAbs(ws):
		return spec, 0, invalid("create sandbox: policy: filesystem.workspace: must be an absolute path, got %q", ws)
	case policy.SystemDir(ws):
		return spec, 0, invalid("create sandbox: policy: filesystem.workspace: %q is a system directory", ws)
	}
	// The workspace is made in the sandbox's layer; the host's root is
	// looked at only where the sandbox's view shows it, so that the
	// answer is the same whatever the host holds where the view hides it.
	if rt := m.remote(spec.Tier); rt != nil {
		// Its image is the cluster's to pull, its workspace the pod's.
		return spec, timeout, nil
	}
	if ref, ok := spec.Image(); ok {
		// Made in the image's root, whatever it holds there; the image
		// must be in the daemon's store.
		img, err := m.images.Get(ref)
		if err != nil {
			return spec, 0, invalid("create sandbox: policy: root: image %s is not in the daemon's image store (hutch image pull --state-dir %s %s)", ref, m.cfg.StateDir, ref)
		}
		if !m.imageAllowed(ref, img) {
			return spec, 0, invalid("create sandbox: policy: root: image %s is not one this daemon allows (hutch serve --allow-image)", ref)
		}
		if _, err := m.images.User(img); err != nil {
			return spec, 0, invalid("create sandbox: policy: root: %v", err)
		}
	} else if err := m.rootLayer(spec).CheckWorkspace("", ws); errors.Is(err, sandbox.ErrNotDirInRoot) {
		return spec, 0, invalid("create sandbox: policy: filesystem.workspace: %q: %v", ws, err)
	} else if err != nil {
		return spec, 0, fmt.Errorf("create sandbox: workspace %q: %w", ws, err)
	}
	return spec, timeout, nil
}

// lifetime is the lifetime of a sandbox whose request asked for timeout
// and whose policy for policyTimeout (the daemon's default when both are
// zero).
func (m *Manager) lifetime(timeout, policyTimeout time.Duration) (time.Duration, error) {
	if timeout == 0 {
		timeout = policyTimeout
	}
	if timeout == 0 {
		timeout = m.cfg.DefaultTimeout
	}
	if timeout < 0 || timeout > m.cfg.MaxTimeout {
		return 0, invalid("create sandbox: timeout %s is not between 0 and the maximum of %s", timeout, m.cfg.MaxTimeout)
	}
	return timeout, nil
}

// oneLine is err's message with the problems a policy check joined
// separated by semicolons instead of newlines.
func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

// clonePolicy copies p deeply enough that normalizing the copy leaves p
// (the caller's) untouched.
func clonePolicy(p policy.Spec) policy.Spec {
	fs := &p.Filesystem
	fs.AllowWrite = slices.Clone(fs.AllowWrite)
	fs.DenyRead = slices.Clone(fs.DenyRead)
	fs.AllowRead = slices.Clone(fs.AllowRead)
	fs.DenyWrite = slices.Clone(fs.DenyWrite)
	nw := &p.Network
	nw.AllowedDomains = slices.Clone(nw.AllowedDomains)
	nw.DeniedDomains = slices.Clone(nw.DeniedDomains)
	nw.AllowedCIDRs = slices.Clone(nw.AllowedCIDRs)
	nw.AllowPrivate = slices.Clone(nw.AllowPrivate)
	nw.Hosts = slices.Clone(nw.Hosts)
	p.Secrets = slices.Clone(p.Secrets)
	for i := range p.Secrets {
		p.Secrets[i].Hosts = slices.Clone(p.Secrets[i].Hosts)
	}
	p.Env.Pass = slices.Clone(p.Env.Pass)
	p.Env.Set = maps.Clone(p.Env.Set)
	p.Approvals.Commands = slices.Clone(p.Approvals.Commands)
	p.Approvals.Approved = slices.Clone(p.Approvals.Approved)
	return p
}

// servePolicy refuses, in a normalized policy, what a tenant may not ask of
// a daemon that runs as root for many tenants: anything that opens host
// paths beyond the read-only root with its default denies, or that weakens
// the isolation.
func servePolicy(s policy.Spec, noInternet bool) error {
	var problems []string
	if noInternet {
		for i, d := range s.Network.AllowedDomains {
			if host, _, _ := strings.Cut(d, ":"); host == "*" {
				problems = append(problems, fmt.Sprintf("network.allowed_domains[%d]: %q: this daemon gives sandboxes no access to every host (hutch serve --no-internet); list the hosts", i, d))
			}
		}
	}
	switch s.Network.Mode {
	case "host":
		problems = append(problems, "network.mode: \"host\" is not allowed in hutch serve")
	}
	if _, img := s.Image(); s.Root != policy.DefaultRoot && !img {
		problems = append(problems, "root: only \"host\" or image:REF is allowed in hutch serve")
	}
	if len(s.Filesystem.AllowWrite) > 0 {
		problems = append(problems, "filesystem.allow_write: host paths cannot be made writable in hutch serve")
	}
	if len(s.Filesystem.AllowRead) > 0 {
		problems = append(problems, "filesystem.allow_read: exceptions to the denied paths are not allowed in hutch serve")
	}
	if s.Filesystem.NoDefaultDenies {
		problems = append(problems, "filesystem.no_default_denies: not allowed in hutch serve")
	}
	if s.Filesystem.WorkspaceAt != "" {
		problems = append(problems, "filesystem.workspace_at: a sandbox of hutch serve has its workspace in its own root, at filesystem.workspace")
	}
	if s.BestEffort {
		problems = append(problems, "best_effort: not allowed in hutch serve")
	}
	if s.Filesystem.Home != "" && s.Filesystem.Home != policy.DefaultHome {
		problems = append(problems, fmt.Sprintf("filesystem.home: %q: a sandbox of hutch serve has a home of its own in its writable root (HOME=/root); the host's homes are not in it", s.Filesystem.Home))
	}
	if len(problems) > 0 {
		return invalid("policy: %s", strings.Join(problems, "; "))
	}
	return nil
}

// CheckLabels bounds a create's labels (at most 64; non-empty printable
// keys of at most 128 bytes; values of at most 512 bytes of UTF-8 text
// without NUL); field names them in the error, as the caller's request
// does ("labels", E2B's "metadata").
func CheckLabels(field string, labels map[string]string) error {
	if len(labels) > MaxLabels {
		return invalid("%s: %d entries, at most %d allowed", field, len(labels), MaxLabels)
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		v := labels[k]
		switch {
		case k == "":
			return invalid("%s: empty key", field)
		case len(k) > MaxLabelKey:
			return invalid("%s: key %.32q… is longer than %d bytes", field, k, MaxLabelKey)
		case !policy.Printable(k):
			return invalid("%s: key %q is not printable UTF-8", field, k)
		case len(v) > MaxLabelValue:
			return invalid("%s: %.32q: value longer than %d bytes", field, k, MaxLabelValue)
		case !utf8.ValidString(v) || strings.ContainsRune(v, 0):
			return invalid("%s: %q: value is not valid UTF-8 text", field, k)
		}
	}
	return nil
}

// CheckEnv bounds a create's environment (at most 256 variables and
// 128 KiB in all; names without '=', NUL or control characters, values
// without NUL); field names it in the error ("env", E2B's "envVars").
func CheckEnv(field string, env map[string]string) error {
	if len(env) > MaxEnvVars {
		return invalid("%s: %d variables, at most %d allowed", field, len(env), MaxEnvVars)
	}
	size := 0
	for _, name := range slices.Sorted(maps.Keys(env)) {
		value := env[name]
		size += len(name) + len(value) + 2
		switch {
		case name == "":
			return invalid("%s: empty variable name", field)
		case strings.ContainsAny(name, "=\x00") || !policy.Printable(name):
			return invalid("%s: invalid variable name %.64q", field, name)
		case strings.ContainsRune(value, 0):
			return invalid("%s: %.64q: value contains a NUL byte", field, name)
		}
	}
	if size > MaxEnvBytes {
		return invalid("%s: %d bytes in all, at most %d allowed", field, size, MaxEnvBytes)
	}
	return nil
}

// environ is the environment of the sandbox's commands: the policy's
// env.set (nothing is passed from the daemon's own environment), the
// request's variables over it, and HOME and PATH unless set.
func environ(e policy.Env, extra map[string]string) []string {
	vars := make(map[string]string)
	for _, kv := range policy.BuildEnv(e, nil) {
		name, value, _ := strings.Cut(kv, "=")
		vars[name] = value
	}
	maps.Copy(vars, extra)
	if _, ok := vars["HOME"]; !ok {
		vars["HOME"] = "/root"
	}
	if _, ok := vars["PATH"]; !ok {
		vars["PATH"] = defaultPath
	}
	return envEntries(vars)
}

// imageEnv is the environment of a sandbox started from an image whose
// own is base: the image's variables, under env (the policy's and the
// request's), but for PATH and HOME, which are the image's unless the
// policy sets them (env holds the daemon's defaults for both).
func imageEnv(base, env []string, p policy.Env) []string {
	vars := make(map[string]string)
	for _, kv := range base {
		name, value, _ := strings.Cut(kv, "=")
		vars[name] = value
	}
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		if _, set := p.Set[name]; !set && (name == "PATH" || name == "HOME") {
			if _, own := vars[name]; own {
				continue
			}
		}
		vars[name] = value
	}
	return envEntries(vars)
}

// imageUserEnv is img's own environment with, when it names a user, that
// user's HOME (unless the image sets one), USER and LOGNAME.
func imageUserEnv(img *image.Image, u image.User) []string {
	env := slices.Clip(img.Config.Env)
	if img.Config.User == "" {
		return env
	}
	vars := map[string]string{"HOME": u.Home, "USER": u.Name, "LOGNAME": u.Name}
	for _, name := range []string{"HOME", "USER", "LOGNAME"} {
		if vars[name] != "" && !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, name+"=") }) {
			env = append(env, name+"="+vars[name])
		}
	}
	return env
}

// envEntries turns env into NAME=VALUE entries, sorted by name.
func envEntries(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for _, name := range slices.Sorted(maps.Keys(env)) {
		out = append(out, name+"="+env[name])
	}
	return out
}

// newProxy makes the egress proxy of sandbox id, with its secrets (nil for
// none): its refusals, and the names the sandbox looked up, go to the
// daemon's log and to the sandbox's event log ev. In network mode "none"
// it refuses every destination (egress.Config.Offline). Its address guard lets through what open (the daemon's
// configuration) opens and, for the operator's policy only (operator),
// what the policy's allow_private and IP-literal rules open: a tenant's
// rules open nothing the guard refuses, whatever a front end let through.
func newProxy(nw policy.Network, open []netip.Prefix, operator bool, id string, log *slog.Logger, ev *eventLog, list []*secrets.Secret) (*egress.Proxy, error) {
	rules, err := proxyRules(nw, open, operator, list)
	if err != nil {
		return nil, err
	}
	return &egress.Proxy{
		Rules:    rules,
		Sandbox:  id,
		Log:      log,
		Hostname: sandbox.Hostname,
		Record: func(e egress.Event) {
			if e.Action == "lookup" {
				log.Debug("name lookup in the sandbox", "host", e.Host)
				ev.append(EventLookup, map[string]any{"host": e.Host, "reason": e.Reason, "allow": e.Allow}, false)
				return
			}
			EgressRefused.With().Inc()
			log.Info("egress refused", "protocol", e.Protocol, "host", e.Host, "port", e.Port, "reason", e.Reason, "rule", e.Rule, "allow", e.Allow)
			ev.append(EventEgressRefused, map[string]any{"protocol": e.Protocol, "host": e.Host, "port": e.Port, "reason": e.Reason, "allow": e.Allow}, false)
		},
	}, nil
}

// proxyRules are the rules of a sandbox's egress proxy for nw, as
// newProxy describes them, binding the secrets of list.
func proxyRules(nw policy.Network, open []netip.Prefix, operator bool, list []*secrets.Secret) (*egress.Rules, error) {
	cfg, err := egress.ConfigFromPolicy(nw)
	if err != nil {
		return nil, invalid("policy: %v", err)
	}
	cfg.Secrets = list
	if cfg.Headers, err = egress.HeaderRules(nw.Headers, list); err != nil {
		return nil, invalid("policy: %v", err)
	}
	cfg.OperatorRules = operator
	cfg.Offline = nw.Mode == "none"
	if !operator {
		cfg.AllowPrivate, cfg.PrivateNames = nil, nil
	}
	cfg.AllowPrivate = append(slices.Clone(open), cfg.AllowPrivate...)
	rules, err := egress.NewRules(cfg)
	if err != nil {
		return nil, invalid("policy: %v", err)
	}
	return rules, nil
}

// operatorOnly ends the message of a tenant's network rule that asks for
// what only the operator may open.
const operatorOnly = "only the daemon's operator may open loopback, private, link-local, metadata and this host's addresses (on its unix socket, or for every sandbox with hutch serve --allow-private)"

// tenantNetwork refuses, in a tenant's normalized policy, a secret whose
// value would come from the daemon's environment or files, and what would
// open an address the egress proxy's guard refuses: network.allow_private, and
// IP-literal allow rules, CIDRs, host pins (network.hosts) and secrets'
// hosts for loopback, private, link-local, metadata, CGNAT or this host's
// addresses, in any spelling (v4-mapped, NAT64, 6to4 …), unless the
// daemon's configuration opened them (Config.AllowPrivate). The proxy of
// a tenant's sandbox would refuse them anyway (newProxy); this names the
// field instead.
func (m *Manager) tenantNetwork(s policy.Spec) error {
	hostAddrs, err := egress.HostAddrs()
	if err != nil {
		return fmt.Errorf("the host's addresses: %w", err)
	}
	var problems []string
	nw := s.Network
	if len(nw.AllowPrivate) > 0 {
		problems = append(problems, "network.allow_private")
	}
	if len(nw.PrivateNames) > 0 {
		problems = append(problems, "network.private_names")
	}
	rule := func(field string, i int, entry string, cidr bool) {
		class, err := egress.SpecialRule(entry, cidr, hostAddrs, m.cfg.AllowPrivate)
		switch {
		case err != nil:
			// Validate would have refused it; name it all the same.
			problems = append(problems, fmt.Sprintf("%s[%d]: %q: %v", field, i, entry, err))
		case class != "":
			problems = append(problems, fmt.Sprintf("%s[%d]: %q names %s addresses", field, i, entry, class))
		}
	}
	for i, d := range nw.AllowedDomains {
		rule("network.allowed_domains", i, d, false)
	}
	for i, c := range nw.AllowedCIDRs {
		rule("network.allowed_cidrs", i, c, true)
	}
	for i, sec := range s.Secrets {
		for j, h := range sec.Hosts {
			rule(fmt.Sprintf("secrets[%d].hosts", i), j, h, false)
		}
	}
	for i, h := range nw.Hosts {
		_, addr, err := policy.SplitHostPin(h)
		if err != nil {
			problems = append(problems, fmt.Sprintf("network.hosts[%d]: %v", i, err))
			continue
		}
		addr = addr.WithZone("").Unmap()
		class := egress.Classify(addr, hostAddrs)
		if class != "" && !slices.ContainsFunc(m.cfg.AllowPrivate, func(p netip.Prefix) bool { return p.Contains(addr) }) {
			problems = append(problems, fmt.Sprintf("network.hosts[%d]: %q pins a name to a %s address", i, h, class))
		}
	}
	if len(problems) > 0 {
		return invalid("policy: %s: %s", strings.Join(problems, "; "), operatorOnly)
	}
	// A secret's value comes with a tenant's request, never from the
	// daemon's own environment or files, which the proxy would send to
	// the tenant's chosen host.
	for i, sec := range s.Secrets {
		if sec.From != policy.SecretFromRequest {
			return invalid("policy: secrets[%d].from: %q: a tenant's secret takes its value from the request (only the daemon's operator may name its environment or files)", i, sec.From)
		}
	}
	return nil
}

// CheckTenantRule checks an egress allow rule a tenant wrote (see
// Sandboxes), with what the daemon's configuration opened.
func (m *Manager) CheckTenantRule(field, entry string, cidr bool) error {
	return TenantRule(field, entry, cidr, m.cfg.AllowPrivate)
}

// TenantRule checks an egress allow rule a tenant wrote, in the syntax of
// network.allowed_domains (cidr false) or allowed_cidrs (cidr true): an
// error of category ErrInvalid naming field when it does not parse, or
// when it asks for addresses the guard refuses (loopback, private,
// link-local, metadata, this host's …) outside open, the ranges the
// operator opened for every sandbox.
func TenantRule(field, entry string, cidr bool, open []netip.Prefix) error {
	hostAddrs, err := egress.HostAddrs()
	if err != nil {
		return fmt.Errorf("the host's addresses: %w", err)
	}
	class, err := egress.SpecialRule(entry, cidr, hostAddrs, open)
	switch {
	case err != nil:
		return invalid("%s: %q: %v", field, entry, err)
	case class != "":
		return invalid("%s: %q names %s addresses: %s", field, entry, class, operatorOnly)
	}
	return nil
}
