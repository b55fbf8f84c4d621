package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// erofsRoots is the snapshot store's directory of the EROFS roots of
// microVM guests started from snapshots' files (snapshotEROFS).
const erofsRoots = "erofs"

// snapshotEROFS returns the EROFS root of a microVM guest started from
// snapshot snap's files: dirs, the image's layers and the snapshot's
// (bottom first), merged into one read-only filesystem
// (image.BuildEROFS), built the first time and kept in the snapshot
// store, named by the snapshot. It goes with the snapshot's record
// (collectEROFS), which stays while a sandbox stacks the snapshot's
// layers; a guest holds the file open from its start. It counts against
// the tenant's snapshot bytes (snapshotBytes): before the first build, the
// tenant must have room for about the image's EROFS root (base) and the
// snapshot's files, else the start fails with ErrQuota.
func (m *Manager) snapshotEROFS(ctx context.Context, snap *store.Snapshot, dirs []string, base string) (string, error) {
	if !validSnapID(snap.ID) {
		return "", fmt.Errorf("snapshot %q: not a snapshot id", snap.ID)
	}
	path := m.erofsPath(snap.ID)
	// The quota's check and the build are one step, as a snapshot's
	// check and copy are (snapMu, taken before erofsMu as a snapshot's
	// collection takes them).
	m.snapMu.Lock()
	defer m.snapMu.Unlock()
	m.erofsMu.Lock()
	defer m.erofsMu.Unlock()
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	have, err := m.st.ListSnapshots(ctx, snap.Tenant, false)
	if err != nil {
		return "", err
	}
	estimate := snap.Size
	if fi, err := os.Stat(base); err == nil {
		estimate += fi.Size()
	}
	if used := m.snapshotBytes(have); used+estimate > m.cfg.MaxSnapshotBytes {
		return "", fmt.Errorf("snapshot %s: a microVM starts from its files in an EROFS root of the image's files and the snapshot's, about %d bytes, kept with the snapshot, and the tenant's snapshots hold %d of %d bytes allowed: %w",
			snap.ID, estimate, used, m.cfg.MaxSnapshotBytes, ErrQuota)
	}
	if err := image.BuildEROFS(dirs, path); err != nil {
		return "", fmt.Errorf("snapshot %s: the EROFS root of its files: %w", snap.ID, err)
	}
	return path, nil
}

// erofsPath is where snapshot sid's EROFS root is kept (snapshotEROFS).
func (m *Manager) erofsPath(sid string) string {
	return filepath.Join(m.snapRoot, erofsRoots, sid+".erofs")
}

// snapshotBytes is what the snapshots hold on disk: their files and
// memory, and the EROFS roots of microVM guests started from their files.
func (m *Manager) snapshotBytes(have []store.Snapshot) int64 {
	var used int64
	for _, sn := range have {
		used += sn.Size + sn.Memory
		if fi, err := os.Stat(m.erofsPath(sn.ID)); err == nil {
			used += fi.Size()
		}
	}
	return used
}

// collectEROFS removes the EROFS roots of snapshots whose records are
// gone (kept names those that stay), and what an unfinished build left.
func (m *Manager) collectEROFS(kept map[string]bool) {
	m.erofsMu.Lock()
	defer m.erofsMu.Unlock()
	dir := filepath.Join(m.snapRoot, erofsRoots)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		name := e.Name()
		if sid, ok := strings.CutSuffix(name, ".erofs"); ok && kept[sid] || name == "empty" {
			continue
		}
		if err := image.RemoveTree(filepath.Join(dir, name)); err != nil {
			m.log.Error("remove a snapshot's EROFS root", "file", name, "err", err)
		}
	}
}
