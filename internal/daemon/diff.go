package daemon

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/changes"
)

// Diff is what a sandbox changed in its root against another root: its
// base, a snapshot, or another sandbox. Close lets go of what it holds.
type Diff struct {
	// Against names the other root: "base" (the sandbox's image, or the
	// host's root), a snapshot's id, or a sandbox's id.
	Against string `json:"against"`
	// Changes are the changes, sorted by path (relative to the root).
	Changes []changes.Change `json:"-"`
	// Sides read the files of both roots for a diff's renderers.
	Sides changes.Sides `json:"-"`

	close func()
}

// Close lets go of what d holds (the layers and the view of the host's
// root it reads).
func (d *Diff) Close() {
	if d.close != nil {
		d.close()
		d.close = nil
	}
}

// AgainstBase is Diff's other root when none is named: the sandbox's image
// (or the host's root), without the snapshot it may have started from.
const AgainstBase = "base"

// Diff compares what tenant's running sandbox id holds in its root with
// against: AgainstBase or "" (its image, or the host's root as the
// sandbox saw it), a snapshot of the tenant's, or another of its running
// sandboxes, which must have the same base. Only the paths the two roots'
// own layers hold are looked at; of the host's root, nothing the sandbox
// could not see is (its hidden directories show empty, its closed files
// not at all), and the directory the daemon made as the workspace is not a
// change. The sandbox runs on meanwhile: a file it writes during the diff
// is read as it is then.
func (m *Manager) Diff(ctx context.Context, tenant, id, against string) (*Diff, error) {
	l, err := m.running(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	if l.keep == "" {
		return nil, fmt.Errorf("diff of sandbox %s: the %s tier keeps its root where the daemon cannot read it (the namespace and gVisor tiers of a daemon run as root can): %w", id, l.tier, ErrUnsupported)
	}
	d := &Diff{Against: against}
	var releases []func()
	d.close = func() {
		for _, r := range slices.Backward(releases) {
			r()
		}
	}
	fail := func(err error) (*Diff, error) {
		d.Close()
		return nil, err
	}
	base := ""
	if l.image == "" {
		b, release, err := hostRootView()
		if err != nil {
			return fail(fmt.Errorf("diff of sandbox %s: %w", id, err))
		}
		base = b
		releases = append(releases, release)
	}
	dirs, remove := closedPathsIf(l.image == "")
	hide := append(m.hiddenIf(l.image == ""), dirs...)
	stackOf := func(layers []string) *changes.Stack {
		return &changes.Stack{Layers: layers, Base: base, Hide: hide, Remove: remove}
	}
	sbStack := func(o *live) *changes.Stack {
		layers := []string{o.keep + "/upper"}
		layers = append(layers, reversed(o.snapDirs)...)
		return stackOf(append(layers, reversed(o.imageDirs)...))
	}
	var old *changes.Stack
	switch {
	case against == "" || against == AgainstBase:
		d.Against = AgainstBase
		old = stackOf(reversed(l.imageDirs))
	case strings.HasPrefix(against, snapPrefix):
		sn, err := m.snapshotRow(ctx, tenant, against)
		if err != nil {
			return fail(fmt.Errorf("diff of sandbox %s: %w", id, err))
		}
		if sn.Image != l.image {
			return fail(invalid("diff of sandbox %s against snapshot %s: their bases differ (%s, %s): diff against a snapshot of the same base", id, against, baseName(l.image), baseName(sn.Image)))
		}
		sdirs, release, err := m.holdLayers(sn.Layers)
		if err != nil {
			return fail(err)
		}
		releases = append(releases, release)
		if l.image == "" {
			// Over the host's root a snapshot's last layer holds it all.
			sdirs = sdirs[len(sdirs)-1:]
		}
		old = stackOf(append(reversed(sdirs), reversed(l.imageDirs)...))
	default:
		o, err := m.running(ctx, tenant, against)
		if err != nil {
			return fail(fmt.Errorf("diff of sandbox %s against %s: %w", id, against, err))
		}
		if o.keep == "" {
			return fail(fmt.Errorf("diff of sandbox %s against %s: the %s tier keeps its root where the daemon cannot read it: %w", id, against, o.tier, ErrUnsupported))
		}
		if o.image != l.image {
			return fail(invalid("diff of sandbox %s against sandbox %s: their bases differ (%s, %s): diff against a sandbox of the same base", id, against, baseName(l.image), baseName(o.image)))
		}
		old = sbStack(o)
	}
	now := sbStack(l)
	list, err := changes.Compare(old, now)
	if errors.Is(err, changes.ErrUnrelated) || errors.Is(err, changes.ErrTooMany) {
		return fail(invalid("diff of sandbox %s against %s: %v", id, d.Against, err))
	}
	if err != nil {
		return fail(fmt.Errorf("diff of sandbox %s: %w", id, err))
	}
	// The directories the daemon made in the layers — the workspace,
	// the hidden directories and the way to them (which the host may
	// have removed since) — are no change of the sandbox's.
	sb, err := m.row(ctx, tenant, id)
	if err != nil {
		return fail(err)
	}
	made := map[string]bool{}
	for _, p := range append([]string{recordedWorkspace(sb.Spec)}, hide...) {
		for p = path.Clean("/" + p); p != "/"; p = path.Dir(p) {
			made[strings.TrimPrefix(p, "/")] = true
		}
	}
	d.Changes = slices.DeleteFunc(list, func(c changes.Change) bool {
		return made[c.Path] && c.Kind == changes.Added && c.New.Type == changes.Dir
	})
	d.Sides = changes.Sides{Old: old, New: now}
	return d, nil
}

// hostRootView returns a path to a view of the host's root filesystem
// alone, as a sandbox's root layer stacks it (without what is mounted
// below it), and what lets it go.
func hostRootView() (string, func(), error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, "/", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return "", nil, fmt.Errorf("a view of the host's root: %w", err)
	}
	return "/proc/self/fd/" + strconv.Itoa(fd), func() { unix.Close(fd) }, nil
}

// closedPathsIf is closedPaths when host (a sandbox over the host's root),
// else nothing.
func closedPathsIf(host bool) (dirs, files []string) {
	if !host {
		return nil, nil
	}
	return closedPaths()
}

// hiddenIf is m.hidden() when host, else nothing.
func (m *Manager) hiddenIf(host bool) []string {
	if !host {
		return nil
	}
	return m.hidden()
}

// reversed returns a reversed copy of dirs (bottom first to top first).
func reversed(dirs []string) []string {
	out := slices.Clone(dirs)
	slices.Reverse(out)
	return out
}

// baseName names a base for an error: an image's digest, or the host's
// root.
func baseName(image string) string {
	if image == "" {
		return "the host's root"
	}
	return "image " + image
}
