package daemon

import (
	"context"
	"errors"
	"fmt"

	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/image/export"
)

// maxExports bounds the snapshot exports at once: each reads every byte
// of its image twice.
const maxExports = 2

// SnapshotImage is a snapshot's export as an image, ready to be written
// (WriteTo) and to be closed: until then, its layers stay.
type SnapshotImage struct {
	*export.Image
	release func()
}

// Close lets go of the snapshot's layers and of the export's slot.
func (s *SnapshotImage) Close() {
	if s.release != nil {
		s.release()
		s.release = nil
	}
}

// SnapshotImage prepares the export of tenant's snapshot sid as an OCI
// image (package export): its base image's layers, then its own, under
// the base's configuration. name, if set, is the reference the image is
// written under. Its layers are hashed here, and are held until Close.
// A snapshot over the host's root is not a whole image (ErrInvalid); one
// whose base image left the image store cannot be exported (ErrConflict);
// past maxExports at once, ErrQuota.
func (m *Manager) SnapshotImage(ctx context.Context, tenant, sid, name string) (*SnapshotImage, error) {
	if name != "" {
		if _, err := image.Normalize(name); err != nil {
			return nil, invalid("export snapshot %s: name: %v", sid, err)
		}
	}
	if err := m.enter(); err != nil {
		return nil, err
	}
	sn, err := m.snapshotRow(ctx, tenant, sid)
	m.leave()
	if err != nil {
		return nil, err
	}
	if sn.Image == "" {
		return nil, invalid("export snapshot %s: it is of a sandbox over the host's root (root %q): its layers hold only what the sandbox wrote over this machine's files, not a whole image; export a snapshot of a sandbox started from an image (root image:REF)", sn.ID, sn.Root)
	}
	select {
	case m.exports <- struct{}{}:
	default:
		return nil, fmt.Errorf("export snapshot %s: %d exports run already; try again when one has ended: %w", sn.ID, maxExports, ErrQuota)
	}
	out := &SnapshotImage{release: func() { <-m.exports }}
	fail := func(err error) (*SnapshotImage, error) {
		out.Close()
		return nil, err
	}
	img, err := m.images.Get(sn.Image)
	if errors.Is(err, image.ErrNotFound) {
		return fail(fmt.Errorf("export snapshot %s: its base image %s (%s) is no longer in the daemon's image store: %w", sn.ID, sn.Image, sn.Root, ErrConflict))
	}
	if err != nil {
		return fail(err)
	}
	base, releaseBase, err := m.images.Stack(img)
	if err != nil {
		return fail(fmt.Errorf("export snapshot %s: %w", sn.ID, err))
	}
	out.release = chain(releaseBase, out.release)
	layers, releaseLayers, err := m.holdLayers(sn.Layers)
	if err != nil {
		return fail(fmt.Errorf("export snapshot %s: %w", sn.ID, err))
	}
	out.release = chain(releaseLayers, out.release)
	cfg, err := m.images.ConfigFile(img.Digest)
	if err != nil {
		return fail(err)
	}
	out.Image, err = export.Plan(export.Source{
		Base: img, BaseConfig: cfg, BaseLayers: base, Layers: layers,
		Created: sn.Created, CreatedBy: "hutch snapshot " + sn.ID, Name: name,
	})
	if err != nil {
		return fail(fmt.Errorf("export snapshot %s: %w", sn.ID, err))
	}
	m.log.Info("snapshot export", "snapshot", sn.ID, "tenant", tenant, "digest", out.Digest())
	return out, nil
}

// SnapshotExporter is what a front end needs to export snapshots;
// *Manager implements it.
type SnapshotExporter interface {
	SnapshotImage(ctx context.Context, tenant, sid, name string) (*SnapshotImage, error)
}

var _ SnapshotExporter = (*Manager)(nil)
