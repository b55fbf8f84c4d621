package cgroups

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/mountinfo"
)

// This file turns /proc/self/mountinfo and /proc/self/cgroup into an Info,
// and an Info and Limits into the directories a group needs. It reads no
// files, so it is tested on samples of every layout.

// mount is one cgroup hierarchy mounted in /proc/self/mountinfo.
type mount struct {
	point string   // where it is mounted
	root  string   // the cgroup it shows at point
	v2    bool     // cgroup2, else cgroup v1
	opts  []string // super options; a v1 mount's name its controllers
}

// parseMountinfo returns the cgroup mounts in a mountinfo text, in order.
func parseMountinfo(s string) []mount {
	var ms []mount
	for _, m := range mountinfo.Parse(s) {
		if m.FSType != "cgroup" && m.FSType != "cgroup2" {
			continue
		}
		ms = append(ms, mount{point: m.Point, root: m.Root, v2: m.FSType == "cgroup2", opts: m.SuperOptions})
	}
	return ms
}

// membership is one line of /proc/self/cgroup: the caller's cgroup in one
// hierarchy.
type membership struct {
	controllers []string // the v1 hierarchy's controllers; none for v2
	path        string   // relative to the hierarchy's root
}

// parseSelfCgroup parses /proc/self/cgroup ("ID:CONTROLLERS:PATH" lines).
func parseSelfCgroup(s string) ([]membership, error) {
	var ms []membership
	for line := range strings.Lines(s) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || !strings.HasPrefix(f[2], "/") {
			return nil, fmt.Errorf("cgroups: parse /proc/self/cgroup line %q: want ID:CONTROLLERS:/PATH", line)
		}
		m := membership{path: f[2]}
		if f[1] != "" {
			m.controllers = strings.Split(f[1], ",")
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// ownDirs finds the caller's own cgroup directory in each hierarchy: v2 in
// the unified one ("" when none is mounted), v1 per v1 controller. A
// hierarchy mounted more than once is taken from its first mount that shows
// the caller's cgroup.
func ownDirs(mounts []mount, ms []membership) (v2 string, v1 map[string]string) {
	v1 = map[string]string{}
	for _, m := range ms {
		unified := len(m.controllers) == 0
		for _, mt := range mounts {
			if mt.v2 != unified || !mt.v2 && !containsAll(mt.opts, m.controllers) {
				continue
			}
			rel, ok := under(m.path, mt.root)
			if !ok {
				continue
			}
			dir := path.Join(mt.point, rel)
			if unified {
				v2 = dir
			}
			for _, c := range m.controllers {
				if !strings.Contains(c, "=") { // skip named hierarchies such as name=systemd
					v1[c] = dir
				}
			}
			break
		}
	}
	return v2, v1
}

func containsAll(set, items []string) bool {
	for _, it := range items {
		if !slices.Contains(set, it) {
			return false
		}
	}
	return true
}

// under returns p relative to root, if p is root or beneath it.
func under(p, root string) (string, bool) {
	switch {
	case root == "/":
		return p, true
	case p == root:
		return "/", true
	case strings.HasPrefix(p, root+"/"):
		return p[len(root):], true
	}
	return "", false
}

// newInfo describes the layout: v2 is the caller's v2 directory, v2ctls the
// content of its cgroup.controllers, v1 the v1 controllers' directories. A
// controller offered by v2 is used from v2.
func newInfo(v2, v2ctls string, v1 map[string]string) Info {
	info := Info{Unified: v2, Controllers: map[string]Controller{}}
	for c, dir := range v1 {
		info.Controllers[c] = Controller{Version: 1, Path: dir}
	}
	for _, c := range strings.Fields(v2ctls) {
		info.Controllers[c] = Controller{Version: 2, Path: v2}
	}
	return info
}

// part is one directory of a group: made beneath the caller's own cgroup
// own, in the v2 hierarchy or a v1 one, limiting the controllers ctls.
type part struct {
	own  string
	v2   bool
	ctls []string
}

// plan lists the directories a group with limits l needs: a v2 one first
// whenever a v2 hierarchy is mounted (for cgroup.kill, even with no v2
// controller), then one per v1 hierarchy that holds a limited controller.
func plan(info Info, l Limits) ([]part, error) {
	var parts []part
	if info.Unified != "" {
		parts = append(parts, part{own: info.Unified, v2: true})
	}
	for _, lim := range limiters {
		if !lim.needed(l) {
			continue
		}
		c, ok := info.Controllers[lim.controller]
		if !ok {
			return nil, missing(info, lim.controller)
		}
		i := slices.IndexFunc(parts, func(p part) bool { return p.own == c.Path })
		if i < 0 {
			parts = append(parts, part{own: c.Path, v2: c.Version == 2})
			i = len(parts) - 1
		}
		parts[i].ctls = append(parts[i].ctls, lim.controller)
	}
	return parts, nil
}

// missing is the error for a limit whose controller the caller lacks.
func missing(info Info, c string) error {
	why := "neither cgroup v2 nor v1"
	if info.Unified != "" {
		why = fmt.Sprintf("not in %s/cgroup.controllers, and no cgroup v1 %s hierarchy", info.Unified, c)
	}
	return fmt.Errorf("cgroups: %s limit: %w", c, tagged{fmt.Errorf("no %s controller (%s)", c, why), ErrNotSupported})
}
