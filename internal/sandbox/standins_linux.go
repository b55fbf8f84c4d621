package sandbox

import (
	"fmt"
	"slices"
	"sync"

	"github.com/hutch-sandbox/hutch/internal/maskfs"
)

// standIns serves a sandbox's masks and placeholders itself (package
// maskfs), so that what the sandbox tries at them is refused as before and
// also reported: each mask and each placeholder is a node of its own that
// names the path it covers. Without it (hutch not root, or no FUSE) the
// stand-ins are the two empty files and directories of a tmpfs, which
// refuse in the kernel, unseen.
type standIns struct {
	fs    *maskfs.FS
	ready chan struct{} // closed once the mount is made, or failed
	// byChild: the sandbox's first process mounts the filesystem and
	// hands its device over (hutch not root); mnt stays -1.
	byChild bool
	mnt     int        // the detached mount, until sent to the sandbox
	err     error      // why the mount failed
	rules   []nodeRule // per node

	mu    sync.Mutex
	count map[refusalKey]int
	order []refusalKey
	more  int
}

// nodeRule is what a node's refusals say: the rule that refused and the
// flag that would allow it ("" when no flag does).
type nodeRule struct {
	rule, allow string
}

// refusalKey identifies the same refusal, counted once.
type refusalKey struct {
	path string
	op   maskfs.Op
	node int
}

// Node names on the stand-ins' filesystem: a mask of the i-th deny-read
// path as a file or a directory, the placeholder of the j-th protected
// path, and the sandbox's resolv.conf.
func maskNodeName(i int, dir bool) string {
	if dir {
		return fmt.Sprintf("d%d", i)
	}
	return fmt.Sprintf("f%d", i)
}

func coverNodeName(j int) string { return fmt.Sprintf("p%d", j) }

const resolvNodeName = "r"

// startStandIns starts mounting an empty stand-ins filesystem, owned by
// uid and gid on the host, while hutch prepares the rest: the kernel takes
// a while to make one (it registers it as a device), and the paths it is
// to hold are known only later (setNodes).
func startStandIns(uid, gid uint32, byChild bool) *standIns {
	si := &standIns{mnt: -1, ready: make(chan struct{}), count: make(map[refusalKey]int), byChild: byChild}
	si.fs = maskfs.New(nil, uid, gid, si.record)
	if byChild {
		close(si.ready)
		return si
	}
	go func() {
		defer close(si.ready)
		si.mnt, si.err = si.fs.Mount()
	}()
	return si
}

// setNodes waits for the mount and gives it the stand-ins of cfg's
// deny-read masks (denyRead), its placeholders (cfg.DenyWrite entries in
// cfg.Placeholders) and its resolv.conf. defaults are the default
// deny-read paths and userDenyWrite the policy's own deny-write paths, for
// the rules refusals name. It returns why the mount failed, if it did.
func (si *standIns) setNodes(cfg initConfig, denyRead []pathKind, defaults, userDenyWrite []string) error {
	<-si.ready
	if si.err != nil {
		return si.err
	}
	var nodes []maskfs.Node
	var rules []nodeRule
	add := func(n maskfs.Node, r nodeRule) {
		nodes = append(nodes, n)
		rules = append(rules, r)
	}
	for i, d := range denyRead {
		r := nodeRule{rule: "deny-read", allow: "--allow-read " + d.path}
		if slices.Contains(defaults, d.path) {
			r.rule = "deny-read, a default"
		}
		add(maskfs.Node{Name: maskNodeName(i, false), Hidden: true, Path: d.path}, r)
		add(maskfs.Node{Name: maskNodeName(i, true), Dir: true, Hidden: true, Path: d.path}, r)
	}
	for j, path := range cfg.DenyWrite {
		kind, ok := cfg.Placeholders[path]
		if !ok {
			continue
		}
		r := nodeRule{rule: "protected: it would run commands outside the sandbox"}
		if slices.Contains(userDenyWrite, path) {
			r.rule = "deny-write"
		}
		n := maskfs.Node{Name: coverNodeName(j), Mode: 0o444, Path: path}
		switch kind {
		case placeholderDir:
			n.Dir, n.Mode = true, 0o555
		case placeholderSelf:
			n.Data = []byte(".")
		}
		add(n, r)
	}
	if cfg.Listen {
		add(maskfs.Node{Name: resolvNodeName, Mode: 0o444, Data: []byte(resolvConf)}, nodeRule{})
	}
	si.mu.Lock()
	si.rules = rules
	si.mu.Unlock()
	si.fs.SetNodes(nodes)
	return nil
}

// record counts one refusal.
func (si *standIns) record(r maskfs.Refusal) {
	k := refusalKey{path: r.Path, op: r.Op, node: r.Node}
	si.mu.Lock()
	defer si.mu.Unlock()
	switch {
	case si.count[k] > 0:
		si.count[k]++
	case len(si.order) < maxFileRefusals:
		si.count[k] = 1
		si.order = append(si.order, k)
	default:
		si.more++
	}
}

// refused returns the refusals recorded, in the order of the first of
// each, and how many more there were.
func (si *standIns) refused() ([]FileRefusal, int) {
	si.mu.Lock()
	defer si.mu.Unlock()
	out := make([]FileRefusal, 0, len(si.order))
	for _, k := range si.order {
		r := nodeRule{}
		if k.node >= 0 && k.node < len(si.rules) {
			r = si.rules[k.node]
		}
		out = append(out, FileRefusal{Path: k.path, Op: string(k.op), Rule: r.rule, Allow: r.allow, Count: si.count[k]})
	}
	return out, si.more
}

// close stops the server.
func (si *standIns) close() {
	<-si.ready
	if si.mnt >= 0 {
		closeAll([]int{si.mnt})
		si.mnt = -1
	}
	si.fs.Close()
}
