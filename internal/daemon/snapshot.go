package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// Defaults of Config.MaxSnapshots and MaxSnapshotBytes, and the most
// sandboxes one fork makes.
const (
	defaultMaxSnapshots     = 32
	defaultMaxSnapshotBytes = 8 << 30
	MaxForks                = 16
)

// snapPrefix starts every snapshot ID, idChars random characters follow.
const snapPrefix = "snap-"

// keepDir is where, in a namespace-tier sandbox's directory, the tmpfs
// of its root layer is attached too (sandbox.RootLayer.Keep), for
// snapshots to copy what it wrote.
const keepDir = "layer"

// SnapshotInfo describes a snapshot.
type SnapshotInfo struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	// Source is the sandbox it was taken of.
	Source string `json:"source"`
	// Root is its base, the source's policy root: "host" or "image:REF".
	Root string `json:"root"`
	// Image is the base image's digest ("" for the host's root).
	Image string `json:"image,omitempty"`
	// Layers is how many layers stack over the base (one, or more for a
	// snapshot of a sandbox started from a snapshot).
	Layers int `json:"layers"`
	// Size is the bytes of its layers' files.
	Size int64 `json:"size"`
	// Tier is the isolation tier its source ran in.
	Tier string `json:"tier"`
	// Memory says whether the source's kernel, processes and memory were
	// saved with its files (gVisor's checkpoint): sandboxes of its tier
	// started from it go on where the source was. Without, they start
	// their processes afresh from its files.
	Memory bool `json:"memory"`
	// MemorySize is the bytes of what was saved of the source's memory.
	MemorySize int64     `json:"memory_size,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	// Name is the tenant's name for it, if it was given one
	// (SnapshotNamed).
	Name string `json:"name,omitempty"`
}

// ForkResult is one sandbox of a Fork: its description, or why it could
// not be made.
type ForkResult struct {
	Sandbox *Info  `json:"sandbox,omitempty"`
	Error   string `json:"error,omitempty"`
	// Err is the error itself, for a front end to classify.
	Err error `json:"-"`
}

// ErrUnsupported is the category of a call the sandbox's tier cannot
// serve (yet), or the daemon's store (Config.Store: a cluster's keeps no
// snapshots): the API answers 501. It is store.ErrUnsupported, so that
// the store's refusals are in it.
var ErrUnsupported = store.ErrUnsupported

func snapshotInfo(sn store.Snapshot) SnapshotInfo {
	return SnapshotInfo{ID: sn.ID, Tenant: sn.Tenant, Source: sn.Source, Root: sn.Root, Image: sn.Image,
		Layers: len(sn.Layers), Size: sn.Size, Tier: sn.Tier, Memory: sn.Memory > 0, MemorySize: sn.Memory,
		CreatedAt: sn.Created, Name: sn.Name}
}

// newSnapID returns a new random snapshot ID.
func newSnapID() string { return snapPrefix + strings.TrimPrefix(newID(), idPrefix) }

// validSnapID reports whether id has the form newSnapID gives.
func validSnapID(id string) bool {
	rest, ok := strings.CutPrefix(id, snapPrefix)
	return ok && validID(idPrefix+rest)
}

// snapLayerDir is where the snapshot layer digest is.
func (m *Manager) snapLayerDir(digest string) (string, error) {
	hex, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hex) != 64 || strings.Trim(hex, "0123456789abcdef") != "" {
		return "", fmt.Errorf("snapshot layer %q: not a sha256 digest", digest)
	}
	return filepath.Join(m.snapRoot, "layers", hex), nil
}

// memoryDir is where what was saved of snapshot id's source's memory is.
func (m *Manager) memoryDir(id string) string { return filepath.Join(m.snapRoot, "memory", id) }

// memoryRef is the key in Manager.layerRefs of a start from snapshot id's
// saved memory.
func memoryRef(id string) string { return "memory/" + id }

// openSnapshots makes the snapshot layer store below the state directory
// and removes what a previous daemon left unfinished or unused: the
// records of deleted snapshots (no sandbox of that daemon runs any more)
// and the layers no record names.
func (m *Manager) openSnapshots(ctx context.Context) error {
	m.snapRoot = filepath.Join(m.cfg.StateDir, "snapshots")
	m.layerRefs = map[string]int{}
	for _, d := range []string{m.snapRoot, filepath.Join(m.snapRoot, "layers"), filepath.Join(m.snapRoot, "memory"), filepath.Join(m.snapRoot, "tmp"), filepath.Join(m.snapRoot, erofsRoots)} {
		if err := private(d); err != nil {
			return err
		}
	}
	tmp, _ := os.ReadDir(filepath.Join(m.snapRoot, "tmp"))
	for _, e := range tmp {
		_ = image.RemoveTree(filepath.Join(m.snapRoot, "tmp", e.Name()))
	}
	return m.collectLayers(ctx)
}

// collectLayers removes the records of deleted snapshots whose layers no
// sandbox stacks, then the layers no snapshot that is not deleted names
// and no sandbox stacks, and the saved memory of snapshots that are
// deleted (or unknown) and that no sandbox is starting from.
func (m *Manager) collectLayers(ctx context.Context) error {
	m.refMu.Lock()
	defer m.refMu.Unlock()
	all, err := m.st.ListSnapshots(ctx, "", true)
	if err != nil {
		return err
	}
	named := map[string]bool{}
	kept := map[string]bool{} // the snapshots whose records stay
	for _, sn := range all {
		kept[sn.ID] = true
		if !sn.Deleted {
			for _, l := range sn.Layers {
				named[l] = true
			}
			if sn.Memory > 0 {
				named[memoryRef(sn.ID)] = true
			}
			continue
		}
		// A deleted snapshot keeps none of its layers: those running
		// sandboxes stack are held. Its record goes with the last.
		inUse := false
		for _, l := range sn.Layers {
			inUse = inUse || m.layerRefs[l] > 0
		}
		if !inUse {
			if err := m.st.RemoveSnapshot(ctx, sn.ID); err != nil {
				return err
			}
			delete(kept, sn.ID)
		}
	}
	ents, err := os.ReadDir(filepath.Join(m.snapRoot, "layers"))
	if err != nil {
		return err
	}
	for _, e := range ents {
		d := "sha256:" + e.Name()
		if named[d] || m.layerRefs[d] > 0 {
			continue
		}
		if err := image.RemoveTree(filepath.Join(m.snapRoot, "layers", e.Name())); err != nil {
			m.log.Error("remove snapshot layer", "layer", d, "err", err)
		}
	}
	m.collectEROFS(kept)
	mems, err := os.ReadDir(filepath.Join(m.snapRoot, "memory"))
	if err != nil {
		return err
	}
	for _, e := range mems {
		if r := memoryRef(e.Name()); named[r] || m.layerRefs[r] > 0 {
			continue
		}
		if err := image.RemoveTree(m.memoryDir(e.Name())); err != nil {
			m.log.Error("remove a snapshot's memory", "snapshot", e.Name(), "err", err)
		}
	}
	return nil
}

// holdLayers marks layers stacked by one more sandbox and returns their
// directories, and the function that lets go of them.
func (m *Manager) holdLayers(layers []string) ([]string, func(), error) {
	m.refMu.Lock()
	defer m.refMu.Unlock()
	var dirs []string
	for _, l := range layers {
		d, err := m.snapLayerDir(l)
		if err != nil {
			return nil, nil, err
		}
		if err := stillThere(d, "snapshot layer "+l); err != nil {
			return nil, nil, err
		}
		dirs = append(dirs, d)
	}
	for _, l := range layers {
		m.layerRefs[l]++
	}
	release := func() {
		m.refMu.Lock()
		for _, l := range layers {
			if m.layerRefs[l]--; m.layerRefs[l] <= 0 {
				delete(m.layerRefs, l)
			}
		}
		m.refMu.Unlock()
		if err := m.collectLayers(context.Background()); err != nil {
			m.log.Warn("collect snapshot layers", "err", err)
		}
	}
	return dirs, release, nil
}

// stillThere checks that the snapshot store's entry at path (what names
// it) is there: one whose snapshot was deleted meanwhile is not found.
func stillThere(path, what string) error {
	_, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s: its snapshot was deleted: %w", what, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// holdMemory marks snapshot id's saved memory as being started from and
// returns its directory and the function that lets go of it.
func (m *Manager) holdMemory(id string) (string, func(), error) {
	m.refMu.Lock()
	defer m.refMu.Unlock()
	dir := m.memoryDir(id)
	if err := stillThere(dir, "the memory of snapshot "+id); err != nil {
		return "", nil, err
	}
	m.layerRefs[memoryRef(id)]++
	return dir, func() {
		m.refMu.Lock()
		if m.layerRefs[memoryRef(id)]--; m.layerRefs[memoryRef(id)] <= 0 {
			delete(m.layerRefs, memoryRef(id))
		}
		m.refMu.Unlock()
		if err := m.collectLayers(context.Background()); err != nil {
			m.log.Warn("collect snapshot layers", "err", err)
		}
	}, nil
}

// Snapshot copies what tenant's running (or paused) sandbox id wrote to
// its root into an immutable layer of the daemon's snapshot store, and
// records it as a snapshot of the tenant's: sandboxes start from it
// (CreateRequest.Snapshot) with that layer stacked read-only over the
// source's base. The sandbox is frozen for the copy only. Bounded by
// Config.MaxSnapshots and MaxSnapshotBytes (ErrQuota). A gVisor sandbox
// without secrets that is not paused is saved whole — its kernel,
// processes and memory with its files (runsc checkpoint, leaving it
// running) — and sandboxes of that tier started from the snapshot go on
// from there (restoreCopy); its agent is detached for the save, so the
// commands in flight lose their streams (they run on). Otherwise, and
// for sandboxes of another tier started from it, a snapshot is its
// files: SnapshotInfo.Memory says which.
func (m *Manager) Snapshot(ctx context.Context, tenant, id string) (SnapshotInfo, error) {
	return m.SnapshotNamed(ctx, tenant, id, "")
}

// SnapshotNamed is Snapshot, with name (when not empty) the tenant's name
// for the snapshot, which GetSnapshot and creates take as well as its id:
// lowercase letters, digits, '-', '_' and '.', at most 64, starting with
// a letter or digit, not of the form of a snapshot's id (E2B's names may
// start "snap-" too); a name the tenant's live snapshots have already is
// a conflict.
func (m *Manager) SnapshotNamed(ctx context.Context, tenant, id, name string) (SnapshotInfo, error) {
	if err := checkSnapshotName(name); err != nil {
		return SnapshotInfo{}, err
	}
	if err := m.enter(); err != nil {
		return SnapshotInfo{}, err
	}
	defer m.leave()
	sn, err := m.snapshot(ctx, tenant, id, name)
	if err != nil {
		return SnapshotInfo{}, err
	}
	return snapshotInfo(sn), nil
}

// checkSnapshotName checks a snapshot's name (SnapshotNamed).
func checkSnapshotName(name string) error {
	if name == "" {
		return nil
	}
	ok := len(name) <= 64 && !validSnapID(name)
	for i, c := range name {
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		ok = ok && (alnum || i > 0 && (c == '-' || c == '_' || c == '.'))
	}
	if !ok {
		return invalid("snapshot name %.80q: want lowercase letters, digits, '-', '_' and '.', at most 64, starting with a letter or digit, not of the form of a snapshot's id (%s)", name, newSnapID())
	}
	return nil
}

// snapshot is Snapshot's work.
func (m *Manager) snapshot(ctx context.Context, tenant, id, name string) (store.Snapshot, error) {
	l, err := m.running(ctx, tenant, id)
	if err != nil {
		return store.Snapshot{}, err
	}
	if err := m.snapshotsRefused(l.tier); err != nil {
		return store.Snapshot{}, fmt.Errorf("snapshot of sandbox %s: %w", id, err)
	}
	if l.keep == "" && !exportsLayer(l.inst) {
		return store.Snapshot{}, fmt.Errorf("snapshot of sandbox %s: the %s tier keeps its root where the daemon cannot read it (the namespace and gVisor tiers of a daemon run as root can): %w", id, l.tier, ErrUnsupported)
	}
	// One snapshot at a time: the quota's check and the record are one
	// step.
	m.snapMu.Lock()
	defer m.snapMu.Unlock()
	have, err := m.st.ListSnapshots(ctx, tenant, false)
	if err != nil {
		return store.Snapshot{}, err
	}
	used := m.snapshotBytes(have)
	if len(have) >= m.cfg.MaxSnapshots {
		return store.Snapshot{}, fmt.Errorf("snapshot of sandbox %s: the tenant has %d snapshots, the most allowed (delete one first): %w", id, len(have), ErrQuota)
	}
	room := m.cfg.MaxSnapshotBytes - used - l.snapSize
	if room <= 0 {
		return store.Snapshot{}, fmt.Errorf("snapshot of sandbox %s: the tenant's snapshots hold %d of %d bytes allowed: %w", id, used, m.cfg.MaxSnapshotBytes, ErrQuota)
	}
	withMemory := m.keepsMemory(l)
	var spec []byte // its policy, as recorded
	if withMemory {
		sb, err := m.st.GetSandbox(ctx, "", l.id)
		if err == nil {
			err = m.checkDiskFor(sb)
		}
		if err != nil {
			return store.Snapshot{}, fmt.Errorf("snapshot of sandbox %s: %w", id, err)
		}
		spec = sb.Spec
	}

	tmp, err := os.MkdirTemp(filepath.Join(m.snapRoot, "tmp"), "snap-")
	if err != nil {
		return store.Snapshot{}, err
	}
	defer image.RemoveTree(tmp)
	mem := ""
	if withMemory {
		mem = filepath.Join(tmp, "memory")
	}
	made, saved, err := m.copyLayer(l, filepath.Join(tmp, "layer"), mem, room)
	if errors.Is(err, sandbox.ErrLayerTooLarge) {
		return store.Snapshot{}, fmt.Errorf("snapshot of sandbox %s: the tenant's snapshots may hold %d bytes more, and it wrote more (%d of %d allowed held): %w", id, room, used, m.cfg.MaxSnapshotBytes, ErrQuota)
	}
	if err != nil {
		return store.Snapshot{}, fmt.Errorf("snapshot of sandbox %s: %w", id, err)
	}
	var memSize int64
	if saved {
		if err := os.WriteFile(filepath.Join(mem, memoryPolicyFile), spec, 0o600); err != nil {
			return store.Snapshot{}, fmt.Errorf("snapshot of sandbox %s: %w", id, err)
		}
		memSize = max(diskUsage(mem), 1)
		if memSize > room-made.Size {
			return store.Snapshot{}, fmt.Errorf("snapshot of sandbox %s: the tenant's snapshots may hold %d bytes more, and its files and memory take %d (%d of %d allowed held): %w", id, room, made.Size+memSize, used, m.cfg.MaxSnapshotBytes, ErrQuota)
		}
	}
	dst, err := m.snapLayerDir(made.Digest)
	if err != nil {
		return store.Snapshot{}, err
	}
	sn := store.Snapshot{
		ID: newSnapID(), Tenant: tenant, Source: id, Root: l.root, Image: l.image,
		Layers: append(append([]string(nil), l.snapLayers...), made.Digest),
		Size:   l.snapSize + made.Size, Created: time.Now(), Name: name,
		Tier: l.tier, Memory: memSize,
	}
	// The layer in place and its record are one step for collectLayers,
	// which would otherwise remove it as named by no snapshot (a new
	// one, or one whose last snapshot is deleted meanwhile).
	m.refMu.Lock()
	if _, err = os.Lstat(dst); errors.Is(err, os.ErrNotExist) {
		err = os.Rename(filepath.Join(tmp, "layer"), dst)
	} // else (nil): the same layer, of another snapshot
	if err == nil && saved {
		err = os.Rename(mem, m.memoryDir(sn.ID))
	}
	if err == nil {
		err = m.st.InsertSnapshot(ctx, sn)
	}
	m.refMu.Unlock()
	if err != nil {
		// A layer no record names goes now, not at the next collection.
		if cerr := m.collectLayers(context.Background()); cerr != nil {
			m.log.Warn("collect snapshot layers", "err", cerr)
		}
		if errors.Is(err, store.ErrConflict) && name != "" {
			return store.Snapshot{}, fmt.Errorf("snapshot of sandbox %s: the tenant has a snapshot named %q already: %w", id, name, ErrConflict)
		}
		return store.Snapshot{}, err
	}
	l.ev.append(EventSnapshot, map[string]any{"snapshot": sn.ID, "size": sn.Size, "memory": memSize > 0}, false)
	m.log.Info("snapshot taken", "sandbox", id, "tenant", tenant, "snapshot", sn.ID, "size", sn.Size, "layer", made.Digest, "memory", memSize)
	return sn, nil
}

// memorySaver is an instance whose kernel, processes and memory can be
// saved while it goes on (*gvisor.served).
type memorySaver interface {
	// SaveRunning saves the sandbox to dir, frozen meanwhile and while
	// whileFrozen runs; on error dir is the caller's to remove, and an
	// error wrapping sandbox.ErrFrozen says it stays frozen.
	SaveRunning(dir string, whileFrozen func() error) error
}

// keepsMemory reports whether a snapshot of l saves its memory too: its
// tier can save a running sandbox and start copies of it (gVisor's, and
// the microVM's of a guest of an image), and it has no secrets (whose
// real values only the request that created it carried, and whose CA
// file its saved view names).
func (m *Manager) keepsMemory(l *live) bool {
	if _, ok := l.inst.(memorySaver); !ok || l.secrets || l.volumes || !savesMemory(l.inst) {
		return false
	}
	_, ok := m.cfg.Runtimes[l.tier].(restorer)
	return ok
}

// layerExporter is an instance whose root layer is not on the host (a
// microVM's guest keeps it in its memory) and whose agent exports it
// (agent.Client.ExportLayer).
type layerExporter interface {
	// ExportsLayer reports whether its agent does.
	ExportsLayer() bool
}

// exportsLayer reports whether inst is a layerExporter that does.
func exportsLayer(inst instance) bool {
	e, ok := inst.(layerExporter)
	return ok && e.ExportsLayer()
}

// copyLayer copies l's root layer to dst, l frozen meanwhile (unless
// paused already), at most limit bytes. With mem, it saves l's memory
// there too (saved), when l is not paused: its agent is detached for the
// save (the commands in flight go on without their streams, as in a
// pause to disk) and attached again after. A sandbox whose agent exports
// its layer (layerExporter) is not frozen for the copy, which its agent
// makes: its files are as they were as the copy began, a moment before
// its memory was saved (a copy started from that memory has the files
// its memory holds).
func (m *Manager) copyLayer(l *live, dst, mem string, limit int64) (made sandbox.Snapshot, saved bool, err error) {
	l.pauseMu.Lock()
	defer l.pauseMu.Unlock()
	m.mu.Lock()
	stopping, paused := l.stopping, l.paused
	if !stopping && !paused {
		l.paused = true // no command or file call starts meanwhile
	}
	client := l.client
	m.mu.Unlock()
	if stopping {
		return made, false, fmt.Errorf("it is stopping: %w", ErrConflict)
	}
	exported := l.keep == ""
	if paused {
		if exported {
			return made, false, fmt.Errorf("it is paused, and its agent, which copies its files, with it: resume it first: %w", ErrConflict)
		}
		// Frozen already (in memory): its files only.
		made, err = sandbox.SnapshotLayer(l.keep, dst, limit)
		return made, false, err
	}
	thawed := func() {
		m.mu.Lock()
		l.paused = false
		m.mu.Unlock()
	}
	if exported {
		made, err = exportLayer(client, dst, limit)
		if err == nil && mem != "" {
			err = m.saveRunning(l, mem, nil)
		}
		if !errors.Is(err, sandbox.ErrFrozen) {
			thawed()
		}
		return made, err == nil && mem != "", err
	}
	if mem != "" {
		err = m.saveRunning(l, mem, func() error {
			var err error
			made, err = sandbox.SnapshotLayer(l.keep, dst, limit)
			return err
		})
		if !errors.Is(err, sandbox.ErrFrozen) {
			thawed()
		}
		return made, err == nil, err
	}
	if err := l.inst.Freeze(); err != nil {
		thawed()
		return made, false, fmt.Errorf("freeze: %w", err)
	}
	defer func() {
		if err := l.inst.Thaw(); err != nil {
			m.log.Error("thaw after a snapshot", "sandbox", l.id, "err", err)
			return
		}
		thawed()
	}()
	made, err = sandbox.SnapshotLayer(l.keep, dst, limit)
	return made, false, err
}

// exportTimeout bounds an agent's export of its layer.
const exportTimeout = 10 * time.Minute

// exportLayer copies the root layer c's agent exports (a guest's) to dst,
// at most limit bytes, through a directory beside dst.
func exportLayer(c *agent.Client, dst string, limit int64) (sandbox.Snapshot, error) {
	ctx, cancel := context.WithTimeout(context.Background(), exportTimeout)
	defer cancel()
	tmp := dst + ".export"
	defer image.RemoveTree(tmp)
	pr, pw := io.Pipe()
	sent := make(chan error, 1)
	go func() {
		_, err := c.ExportLayer(ctx, pw)
		pw.CloseWithError(err)
		sent <- err
	}()
	made, err := sandbox.SnapshotExported(pr, tmp, dst, limit)
	if err == nil {
		// The tar's end, which the unpacking need not read, and the
		// agent's answer; a guest that sends more is cut off.
		if n, _ := io.CopyN(io.Discard, pr, maxExportTail+1); n > maxExportTail {
			err = fmt.Errorf("its agent sent more than %d bytes after its layer's tar", maxExportTail)
		}
	}
	if err != nil {
		pr.CloseWithError(errors.New("the copy ended"))
		cancel() // an export the copy stopped reading ends
	}
	if serr := <-sent; err == nil && serr != nil {
		err = fmt.Errorf("its agent's export of its layer: %w", serr)
	}
	return made, err
}

// maxExportTail bounds what exportLayer reads after a layer's tar.
const maxExportTail = 1 << 20

// saveRunning saves l's memory to mem while it is frozen for the save
// (and whileFrozen, when not nil, runs), its agent detached; then the
// agent is attached again. l is marked paused.
func (m *Manager) saveRunning(l *live, mem string, whileFrozen func() error) error {
	// Its agent's connection ends on purpose: the watch stops first, and
	// starts again on the new client.
	close(l.unwatch)
	<-l.watched
	defer m.startWatch(l)
	dctx, cancel := context.WithTimeout(context.Background(), detachTimeout)
	conn, err := l.client.Detach(dctx)
	cancel()
	if err != nil {
		m.end(l, "", fmt.Sprintf("its agent connection ended: %v", err))
		return fmt.Errorf("save its memory: %w", err)
	}
	m.unlast(l)
	err = l.inst.(memorySaver).SaveRunning(mem, whileFrozen)
	// The same session goes on, on the same connection (the agent
	// answers once it runs).
	client, aerr := agent.Attach(conn)
	if aerr != nil {
		m.end(l, "", fmt.Sprintf("its agent connection ended: %v", aerr))
		return fmt.Errorf("attach its agent again: %w", aerr)
	}
	m.mu.Lock()
	l.attach(client)
	m.mu.Unlock()
	if errors.Is(err, sandbox.ErrFrozen) {
		if _, uerr := m.st.UpdateSandbox(context.Background(), l.id, func(sb *store.Sandbox) error {
			sb.State = store.StatePaused
			return nil
		}); uerr != nil {
			m.log.Error("record sandbox paused", "sandbox", l.id, "err", uerr)
		}
		return fmt.Errorf("%w; it is paused", err)
	}
	if err == nil {
		// What a copy's commands run with: the source's.
		err = writeResume(mem, resumeState{Env: l.execEnv, User: l.execUser})
	}
	return err
}

// GetSnapshot describes tenant's snapshot sid ("" tenant: any).
func (m *Manager) GetSnapshot(ctx context.Context, tenant, sid string) (SnapshotInfo, error) {
	sn, err := m.snapshotRow(ctx, tenant, sid)
	if err != nil {
		return SnapshotInfo{}, err
	}
	return snapshotInfo(sn), nil
}

// snapshotRow is the record of tenant's snapshot sid, not deleted.
func (m *Manager) snapshotRow(ctx context.Context, tenant, sid string) (store.Snapshot, error) {
	// An id, or (for a tenant) the name it gave one.
	if !validSnapID(sid) && (tenant == "" || sid == "" || checkSnapshotName(sid) != nil) {
		return store.Snapshot{}, fmt.Errorf("snapshot %q: %w", sid, ErrNotFound)
	}
	sn, err := m.st.GetSnapshot(ctx, tenant, sid)
	if errors.Is(err, store.ErrNotFound) {
		return store.Snapshot{}, fmt.Errorf("snapshot %s: %w", sid, ErrNotFound)
	}
	return sn, err
}

// Snapshots lists tenant's snapshots ("" tenant: every tenant's), oldest
// first.
func (m *Manager) Snapshots(ctx context.Context, tenant string) ([]SnapshotInfo, error) {
	rows, err := m.st.ListSnapshots(ctx, tenant, false)
	if err != nil {
		return nil, err
	}
	out := make([]SnapshotInfo, 0, len(rows))
	for _, sn := range rows {
		out = append(out, snapshotInfo(sn))
	}
	return out, nil
}

// DeleteSnapshot deletes tenant's snapshot sid ("" tenant: any's): it is
// no longer listed and no sandbox starts from it; its layers go once no
// running sandbox stacks them (sandboxes started from it run on).
func (m *Manager) DeleteSnapshot(ctx context.Context, tenant, sid string) error {
	if !validSnapID(sid) {
		// A name the tenant gave it.
		sn, err := m.snapshotRow(ctx, tenant, sid)
		if err != nil {
			return err
		}
		sid = sn.ID
	}
	if err := m.st.MarkSnapshotDeleted(ctx, tenant, sid); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("snapshot %s: %w", sid, ErrNotFound)
		}
		return err
	}
	m.log.Info("snapshot deleted", "snapshot", sid, "tenant", tenant)
	return m.collectLayers(ctx)
}

// snapshotBase checks that r, a create from tenant's snapshot sid, asks
// for the snapshot's base (or none: then it is the snapshot's) and
// returns the snapshot.
func (m *Manager) snapshotBase(ctx context.Context, tenant string, r *CreateRequest) (*store.Snapshot, error) {
	sn, err := m.snapshotRow(ctx, tenant, r.Snapshot)
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	root := r.Policy.Root
	switch {
	case root == "" || root == sn.Root:
		r.Policy.Root = sn.Root
	case sn.Image == "" && root == policy.DefaultRoot:
	default:
		ref, ok := r.Policy.Image()
		img, err := m.images.Get(ref)
		if !ok || err != nil || img.Digest != sn.Image {
			return nil, invalid("create sandbox: policy: root %q is not the base of snapshot %s (%s)", root, sn.ID, sn.Root)
		}
	}
	if r.Policy.Tier == "" {
		r.Policy.Tier = sn.Tier
	}
	if sn.Memory > 0 && r.Policy.Tier == sn.Tier {
		if err := m.memoryPolicy(sn, r); err != nil {
			return nil, err
		}
	}
	return &sn, nil
}

// Names in a snapshot's saved memory directory, beside the tier's save.
const memoryPolicyFile = "policy.json" // the source's policy, as recorded

// memoryPolicy makes r, a create from snapshot sn with its memory, start
// with the view the saved kernel has: its source's filesystem, resources
// and network mode (the request's are refused where they differ, but for
// none given); its network's rules, env, labels and timeouts are r's. It
// takes no secrets: the saved processes hold no placeholder of them, and
// their proxy's CA is not in the saved view.
func (m *Manager) memoryPolicy(sn store.Snapshot, r *CreateRequest) error {
	b, err := os.ReadFile(filepath.Join(m.memoryDir(sn.ID), memoryPolicyFile))
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("create sandbox: the memory of snapshot %s: its snapshot was deleted: %w", sn.ID, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("create sandbox: the memory of snapshot %s: %w", sn.ID, err)
	}
	var saved policy.Spec
	if err := specOf(b, &saved); err != nil {
		return fmt.Errorf("create sandbox: the memory of snapshot %s: %w", sn.ID, err)
	}
	if len(r.Secrets) > 0 || len(r.Policy.Secrets) > 0 {
		return invalid("create sandbox: snapshot %s holds its source's memory, and a sandbox started from there takes no secrets (start one from its files only with tier %s, or from a snapshot of a sandbox with them)", sn.ID, policy.TierNamespace)
	}
	if mode := r.Policy.Network.Mode; mode != "" && mode != saved.Network.Mode {
		return invalid("create sandbox: policy: network.mode %q: snapshot %s holds the memory of a sandbox of mode %q, which its copies keep", mode, sn.ID, saved.Network.Mode)
	}
	for _, c := range []struct {
		name        string
		asked, kept any
	}{
		{"filesystem", r.Policy.Filesystem, saved.Filesystem},
		{"resources", r.Policy.Resources, saved.Resources},
	} {
		if f := otherFields(c.asked, c.kept); len(f) > 0 {
			return invalid("create sandbox: policy: %s.%s: snapshot %s holds the memory of a sandbox whose view and limits its copies keep: give its values or none", c.name, strings.Join(f, ", "+c.name+"."), sn.ID)
		}
	}
	r.Policy.Filesystem, r.Policy.Resources, r.Policy.Network.Mode = saved.Filesystem, saved.Resources, saved.Network.Mode
	return nil
}

// otherFields are the JSON names of the fields asked (a struct) sets to
// other values than kept (of the same type) has: those it leaves zero
// take kept's.
func otherFields(asked, kept any) []string {
	a, k := reflect.ValueOf(asked), reflect.ValueOf(kept)
	var out []string
	for i := range a.NumField() {
		if f := a.Field(i); !f.IsZero() && !reflect.DeepEqual(f.Interface(), k.Field(i).Interface()) {
			name, _, _ := strings.Cut(a.Type().Field(i).Tag.Get("json"), ",")
			out = append(out, name)
		}
	}
	return out
}

// Fork snapshots tenant's sandbox id and starts count sandboxes from the
// snapshot (1 to MaxForks), each with the source's policy and labels and
// timeout (DefaultTimeout when zero): under gVisor copies that go on from
// the source's memory, else from its files. Each result is a sandbox or why it
// could not be made; the error is for the fork as a whole (the snapshot).
// The snapshot is deleted at once: its layers stay while the forks run.
func (m *Manager) Fork(ctx context.Context, tenant, id string, count int, timeout time.Duration) ([]ForkResult, error) {
	if count < 1 || count > MaxForks {
		return nil, invalid("fork sandbox %s: count %d is not between 1 and %d", id, count, MaxForks)
	}
	if err := m.enter(); err != nil {
		return nil, err
	}
	sb, err := m.row(ctx, tenant, id)
	if err != nil {
		m.leave()
		return nil, err
	}
	l, err := m.running(ctx, tenant, id)
	if err != nil {
		m.leave()
		return nil, err
	}
	if l.secrets {
		m.leave()
		return nil, invalid("fork sandbox %s: it has secrets, whose values only the request that created it carried", id)
	}
	sn, err := m.snapshot(ctx, tenant, id, "")
	m.leave()
	if err != nil {
		return nil, fmt.Errorf("fork sandbox %s: %w", id, err)
	}
	defer func() {
		if err := m.DeleteSnapshot(context.Background(), tenant, sn.ID); err != nil {
			m.log.Warn("delete a fork's snapshot", "snapshot", sn.ID, "err", err)
		}
	}()
	var spec policy.Spec
	if err := specOf(sb.Spec, &spec); err != nil {
		return nil, fmt.Errorf("fork sandbox %s: %w", id, err)
	}
	out := make([]ForkResult, count)
	done := make(chan struct{}, count)
	for i := range out {
		go func() {
			defer func() { done <- struct{}{} }()
			info, err := m.Create(ctx, tenant, CreateRequest{
				Policy: spec, Labels: sb.Labels, Timeout: timeout,
				IdleTimeout: sb.IdleTimeout, Operator: l.operator, Snapshot: sn.ID,
			})
			if err != nil {
				out[i].Error, out[i].Err = err.Error(), err
				return
			}
			out[i].Sandbox = &info
		}()
	}
	for range count {
		<-done
	}
	l.ev.append(EventForked, map[string]any{"count": count, "snapshot": sn.ID}, false)
	return out, nil
}

// chain is a function that calls a (if set), then b.
func chain(a, b func()) func() {
	if a == nil {
		return b
	}
	return func() { a(); b() }
}

// specOf decodes a sandbox's stored policy into spec.
func specOf(b []byte, spec *policy.Spec) error {
	if err := json.Unmarshal(b, spec); err != nil {
		return fmt.Errorf("its stored policy: %w", err)
	}
	return nil
}

// Snapshotter is what a front end needs for snapshots, forks and diffs;
// *Manager implements it.
type Snapshotter interface {
	Snapshot(ctx context.Context, tenant, id string) (SnapshotInfo, error)
	SnapshotNamed(ctx context.Context, tenant, id, name string) (SnapshotInfo, error)
	GetSnapshot(ctx context.Context, tenant, sid string) (SnapshotInfo, error)
	Snapshots(ctx context.Context, tenant string) ([]SnapshotInfo, error)
	DeleteSnapshot(ctx context.Context, tenant, sid string) error
	Fork(ctx context.Context, tenant, id string, count int, timeout time.Duration) ([]ForkResult, error)
	Diff(ctx context.Context, tenant, id, against string) (*Diff, error)
	// SnapshotsRefused is the refusal a snapshot of a sandbox of policy p
	// would meet for its tier (nil if none), for work that ends in one,
	// such as a template build, to be refused before it starts.
	SnapshotsRefused(p policy.Spec) error
}

var _ Snapshotter = (*Manager)(nil)

// SnapshotsRefused is the refusal a snapshot of a sandbox of p, kept for
// sandboxes of its tier to start from its files (a template build's),
// would meet for that tier, the daemon's default when p names none; nil
// if none.
func (m *Manager) SnapshotsRefused(p policy.Spec) error {
	m.resolveTier(&p)
	if err := m.snapshotsRefused(p.Tier); err != nil {
		return err
	}
	if _, ok := p.Image(); ok {
		return nil
	}
	return tierRefuses(p.Tier, lackFromFiles)
}

// snapshotsRefused is the refusal of a snapshot of a sandbox of tier: a
// remote runtime's; nil if none.
func (m *Manager) snapshotsRefused(tier string) error {
	if rt := m.remote(tier); rt != nil {
		return fmt.Errorf("not for sandboxes on %s: %w", rt.Remote(), ErrUnsupported)
	}
	return nil
}
