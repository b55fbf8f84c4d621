package sandbox

import (
	"path/filepath"
	"slices"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/mountinfo"
)

// withAliases returns the deny-read paths deny with every other name the
// host's mounts give what they name (see aliases), so that no bind mount
// shows a denied file under a name the policy did not list: a bind of the
// home at /mnt/home, of / at /srv/root, of ~/.ssh at /keys. The sandbox's
// mounts are a copy of the host's taken afterwards. Hard links are not
// found (that would take a walk of every filesystem): only a file's owner
// can make one (fs.protected_hardlinks), and its content is then the
// owner's choice to show.
func withAliases(deny []string) []string {
	if len(deny) == 0 {
		return deny
	}
	mounts, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		// Without a mount table there are no mounts to list; the sandbox's
		// own setup fails later on the same file.
		return deny
	}
	if !shared(mounts) {
		// Every filesystem is mounted once (the common case): no name to
		// add, and no deny path needs resolving at this start.
		return deny
	}
	real := make([]string, 0, len(deny))
	for _, p := range deny {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		real = append(real, filepath.Clean(p))
	}
	return append(slices.Clip(deny), aliases(real, mounts)...)
}

// shared reports whether a filesystem shows at more than one mount point
// outside the tiers' state directories: only then can a path have another
// name.
func shared(mounts []mountinfo.Mount) bool {
	seen := map[string]bool{}
	for _, m := range mounts {
		if transient(m.Point) {
			continue
		}
		if seen[m.Dev] {
			return true
		}
		seen[m.Dev] = true
	}
	return false
}

// TierStateDir is where the gVisor tier keeps each running sandbox's
// directory, its root and layers mounted there (gvisor.DefaultStateDir;
// siblings named after it are a test's or a second daemon's). Those
// mounts come and go with their sandboxes and no view shows them: they
// are no names of anything a sandbox could read, and a mask on one would
// vanish under a sandbox still starting.
const TierStateDir = "/run/hutch-gvisor"

// transient reports whether point is in a tier's state directory
// (TierStateDir, or a sibling named after it).
func transient(point string) bool {
	rest, ok := strings.CutPrefix(point, TierStateDir)
	return ok && (rest == "" || rest[0] == '/' || rest[0] == '-')
}

// aliases returns, for the absolute clean paths deny, the other paths
// under which mounts shows the same files: for each path, the mount it is
// in (the last one mounted at the longest point above it) is found, and
// every other mount of the same filesystem (device) that shows the path's
// directory of that filesystem, or a directory inside it, adds its name
// there. Paths already in deny are not repeated, nor are mounts in a
// denied path or in a tier's state directory (transient) looked at.
func aliases(deny []string, mounts []mountinfo.Mount) []string {
	seen := map[string]bool{}
	for _, p := range deny {
		seen[p] = true
	}
	var out []string
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, p := range deny {
		in := -1
		for i, m := range mounts {
			if under(p, []string{m.Point}) && (in < 0 || len(m.Point) >= len(mounts[in].Point)) {
				in = i
			}
		}
		if in < 0 {
			continue
		}
		host := mounts[in]
		rel, err := filepath.Rel(host.Point, p)
		if err != nil {
			continue
		}
		fsPath := filepath.Join(host.Root, rel) // p's path in its filesystem
		for i, m := range mounts {
			if i == in || m.Dev != host.Dev || transient(m.Point) || under(m.Point, deny) {
				continue
			}
			switch {
			case under(fsPath, []string{m.Root}):
				// The mount shows p's directory, or one above it.
				r, err := filepath.Rel(m.Root, fsPath)
				if err == nil {
					add(filepath.Join(m.Point, r))
				}
			case under(m.Root, []string{fsPath}):
				// The mount shows a part of what p names: all of it is
				// denied.
				add(m.Point)
			}
		}
	}
	return out
}
