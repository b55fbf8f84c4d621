package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Group is one sandbox's cgroup: a directory in each hierarchy it needs.
// Its methods may be called from several goroutines; Destroy must be last.
type Group struct {
	dirs   []string // every directory, the v2 one first
	v2     string   // the v2 directory, "" if none
	memory string   // the directory limiting memory, "" if none
	pids   string   // the directory limiting pids, "" if none
	kill   string   // the cgroup.kill file, "" if none
	freeze freezer  // how Kill stops forks while it kills without cgroup.kill

	mu    sync.Mutex
	fd    int // the O_PATH fd FD opened, if hasFD
	hasFD bool
}

// freezer is a file that freezes a group when on is written to it and
// thaws it with off.
type freezer struct{ file, on, off string }

// supervisor is the leaf the caller moves into when its own v2 cgroup must
// shed its processes before it may enable controllers.
const supervisor = "hutch-supervisor"

// killTimeout bounds how long Kill and Destroy wait for processes to die and
// directories to go.
const killTimeout = 5 * time.Second

// layoutOnce guards the caller's cgroup layout, read once per process
// (by layout; a sync.OnceValues would be built at every start of hutch).
var (
	layoutOnce sync.Once
	layoutInfo Info
	layoutErr  error
)

// layout returns the caller's cgroup layout.
func layout() (Info, error) {
	layoutOnce.Do(func() { layoutInfo, layoutErr = readLayout() })
	return layoutInfo, layoutErr
}

// Available describes where each controller lives for the caller.
func Available() (Info, error) {
	info, err := layout()
	info.Controllers = maps.Clone(info.Controllers)
	return info, err
}

func readLayout() (Info, error) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return Info{}, fmt.Errorf("cgroups: %w", tagged{err, ErrNotSupported})
	}
	ms, err := parseSelfCgroup(string(self))
	if err != nil {
		return Info{}, err
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return Info{}, fmt.Errorf("cgroups: %w", err)
	}
	v2, v1 := ownDirs(parseMountinfo(string(mi)), ms)
	var ctls []byte
	if v2 != "" {
		if ctls, err = os.ReadFile(v2 + "/cgroup.controllers"); err != nil {
			return Info{}, fmt.Errorf("cgroups: %w", classify(err))
		}
	}
	return newInfo(v2, string(ctls), v1), nil
}

// Create makes the group name beneath the caller's own cgroup in every
// hierarchy l needs, and sets the limits. With all limits zero it makes
// nothing and returns a Group whose methods do nothing.
func Create(name string, l Limits) (*Group, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if l == (Limits{}) {
		return &Group{}, nil
	}
	return create(name, l)
}

// CreateAlways is Create, but makes the group even when every limit is
// zero, so that its processes can be frozen (Freeze) and killed as a
// whole. The freezer it uses holds every process of the group: the
// group's cgroup v2 directory where the kernel can freeze there (on a
// hybrid machine too: every process is added to, or cloned into, the v2
// directory), else a directory of its own in the v1 freezer hierarchy,
// which Add joins like the others (and FD then declines, so that no
// process is cloned into the v2 directory alone). It fails with
// ErrNotSupported where there is neither.
func CreateAlways(name string, l Limits) (*Group, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	g, err := create(name, l)
	if err != nil {
		return nil, err
	}
	if g.freeze.file == "" {
		_ = g.Destroy()
		return nil, fmt.Errorf("cgroups: create group %s: %w", name, tagged{errors.New("neither cgroup v2 nor a v1 freezer hierarchy can freeze it"), ErrNotSupported})
	}
	return g, nil
}

func create(name string, l Limits) (*Group, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	info, err := layout()
	if err != nil {
		return nil, err
	}
	parts, err := plan(info, l)
	if err != nil {
		return nil, err
	}
	g := &Group{}
	if err := g.make(info, name, l, parts); err != nil {
		g.rmdirs(g.dirs) // best effort: nothing has joined the group yet
		return nil, err
	}
	return g, nil
}

// checkName refuses a group name that is not one directory of its own.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || name == supervisor || strings.ContainsAny(name, "/\n\x00") {
		return fmt.Errorf("cgroups: invalid group name %q", name)
	}
	return nil
}

func (g *Group) make(info Info, name string, l Limits, parts []part) error {
	for _, p := range parts {
		if err := g.makePart(name, l, p); err != nil {
			return err
		}
	}
	if g.v2 != "" {
		g.kill = g.v2 + "/cgroup.kill"
		if v2Freezes(g.v2) {
			g.freeze = freezer{g.v2 + "/cgroup.freeze", "1", "0"}
			return nil
		}
	}
	return g.useV1Freezer(info, name)
}

// makePart makes the directory of p and writes its limits.
func (g *Group) makePart(name string, l Limits, p part) error {
	what := "cgroups: create group"
	if len(p.ctls) > 0 {
		what = "cgroups: " + strings.Join(p.ctls, ",") + " limit"
	}
	if p.v2 {
		if err := enable(p.own, p.ctls); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	dir := filepath.Join(p.own, name)
	if err := unix.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("%s: %w", what, classify(&fs.PathError{Op: "mkdir", Path: dir, Err: err}))
	}
	g.dirs = append(g.dirs, dir)
	if p.v2 {
		g.v2 = dir
	}
	for _, lim := range limiters {
		if !slices.Contains(p.ctls, lim.controller) {
			continue
		}
		switch lim.controller {
		case "memory":
			g.memory = dir
		case "pids":
			g.pids = dir
		}
		for _, s := range lim.settings(l, p.v2) {
			err := writeFile(filepath.Join(dir, s.file), s.value)
			if err != nil && !(s.optional && errors.Is(err, fs.ErrNotExist)) {
				return fmt.Errorf("cgroups: %s limit: %w", lim.controller, classify(err))
			}
		}
	}
	return nil
}

// useV1Freezer adds the group to the v1 freezer hierarchy, if there is one,
// for Kill on kernels whose cgroup v2 cannot freeze (or without cgroup v2).
func (g *Group) useV1Freezer(info Info, name string) error {
	fz, ok := info.Controllers["freezer"]
	if !ok || fz.Version != 1 {
		return nil
	}
	dir := filepath.Join(fz.Path, name)
	if !slices.Contains(g.dirs, dir) {
		if err := g.makePart(name, Limits{}, part{own: fz.Path}); err != nil {
			return err
		}
	}
	g.freeze = freezer{dir + "/freezer.state", "FROZEN", "THAWED"}
	return nil
}

var v2Freeze struct {
	once sync.Once
	ok   bool
}

// v2Freezes reports whether the kernel's cgroup v2 can freeze (Linux 5.2+),
// checked once on dir, a non-root v2 cgroup.
func v2Freezes(dir string) bool {
	v2Freeze.once.Do(func() { v2Freeze.ok = unix.Access(dir+"/cgroup.freeze", unix.F_OK) == nil })
	return v2Freeze.ok
}

// enable lets the children of own, the caller's own v2 cgroup, use the
// controllers ctls. If own holds processes (cgroup v2 allows that only
// where no controllers are enabled for children) and the caller is the only
// one, it moves the caller into own/hutch-supervisor first.
func enable(own string, ctls []string) error {
	if len(ctls) == 0 {
		return nil
	}
	file, val := own+"/cgroup.subtree_control", "+"+strings.Join(ctls, " +")
	err := writeFile(file, val)
	if !errors.Is(err, unix.EBUSY) {
		return classify(err)
	}
	if err := leave(own); err != nil {
		return err
	}
	return classify(writeFile(file, val))
}

// leave moves the caller from own into own/hutch-supervisor, if no other
// process is in own.
func leave(own string) error {
	procs, err := readPids(own + "/cgroup.procs")
	if err != nil {
		return classify(err)
	}
	self := os.Getpid()
	if others := len(slices.DeleteFunc(procs, func(p int) bool { return p == self })); others > 0 {
		return tagged{fmt.Errorf("%s holds %d other processes, and cgroup v2 gives controllers to the children only of a cgroup without processes (or of the root); run hutch in a cgroup of its own, e.g. with systemd-run --scope -p Delegate=yes", own, others), ErrNotSupported}
	}
	leaf := own + "/" + supervisor
	if err := unix.Mkdir(leaf, 0o755); err != nil && err != unix.EEXIST {
		return classify(&fs.PathError{Op: "mkdir", Path: leaf, Err: err})
	}
	return classify(writeFile(leaf+"/cgroup.procs", strconv.Itoa(self)))
}

// Add moves process pid into the group, in every hierarchy.
func (g *Group) Add(pid int) error {
	for _, d := range g.dirs {
		if err := writeFile(d+"/cgroup.procs", strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("cgroups: add process %d: %w", pid, classify(err))
		}
	}
	return nil
}

// FD returns an O_PATH descriptor of the group's v2 directory, for clone3's
// CLONE_INTO_CGROUP, when that directory is the group's only one (every
// limited controller is in v2). The Group owns it: Destroy closes it.
func (g *Group) FD() (int, bool) {
	if len(g.dirs) != 1 || g.v2 == "" {
		return -1, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.hasFD {
		fd, err := unix.Open(g.v2, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, false
		}
		g.fd, g.hasFD = fd, true
	}
	return g.fd, true
}

// Paths returns the group's directories, for diagnostics.
func (g *Group) Paths() []string { return slices.Clone(g.dirs) }

// Kill SIGKILLs every process in the group, wherever it moved in the process
// tree, and waits until none is left. It uses cgroup.kill where the kernel
// has it; else it freezes the group, kills every process listed and thaws
// it, until the group is empty. A group Freeze stopped is thawed once its
// processes were signalled (a v1 frozen task dies only when thawed), so
// Kill and Destroy end a frozen group as well.
func (g *Group) Kill() error {
	if err := g.killAll(); err != nil {
		return fmt.Errorf("cgroups: kill: %w", err)
	}
	return nil
}

func (g *Group) killAll() error {
	if len(g.dirs) == 0 {
		return nil
	}
	if g.kill != "" {
		err := writeFile(g.kill, "1")
		if err == nil {
			// A task of a frozen group dies of SIGKILL on cgroup v2, but a
			// v1 freezer holds it until thawed: thaw, whichever it is.
			if err := g.thawAll(); err != nil {
				return err
			}
			return poll(func() (bool, error) {
				pids, err := g.procs()
				return len(pids) == 0, err
			})
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	self := os.Getpid()
	return poll(func() (bool, error) {
		if err := g.setFrozen(true); err != nil {
			return false, err
		}
		pids, err := g.procs()
		for _, pid := range pids {
			if pid > 0 && pid != self { // 0 is a process outside our pid namespace; kill(0) would hit our own group
				_ = unix.Kill(pid, unix.SIGKILL) // ESRCH: it is gone already
			}
		}
		if err := g.thawAll(); err != nil {
			return false, err
		}
		return len(pids) == 0, err
	})
}

// thawAll thaws the group's freezer and any v1 freezer directory of the
// group (a Group from Named may have both).
func (g *Group) thawAll() error {
	err := g.setFrozen(false)
	for _, d := range g.dirs {
		f := d + "/freezer.state"
		if f == g.freeze.file {
			continue
		}
		if werr := writeFile(f, "THAWED"); werr != nil && !errors.Is(werr, fs.ErrNotExist) {
			err = errors.Join(err, werr)
		}
	}
	return err
}

func (g *Group) setFrozen(on bool) error {
	if g.freeze.file == "" {
		return nil
	}
	v := g.freeze.off
	if on {
		v = g.freeze.on
	}
	if err := writeFile(g.freeze.file, v); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Freeze stops every process of the group where it is, until Thaw; the
// processes notice nothing but the time that passed. It returns once the
// kernel reports the group frozen (cgroup v2: "frozen 1" in cgroup.events;
// v1: freezer.state FROZEN), or fails, the group thawed again, after
// freezeTimeout. A group without a freezer (one made with no limits by
// Create, or on a kernel without either freezer) cannot be frozen.
func (g *Group) Freeze() error {
	if g.freeze.file == "" {
		return fmt.Errorf("cgroups: freeze: %w", tagged{errors.New("the group has no freezer"), ErrNotSupported})
	}
	if err := g.setFrozen(true); err != nil {
		return fmt.Errorf("cgroups: freeze: %w", classify(err))
	}
	done, err := pollFor(freezeTimeout, func() (bool, error) {
		frozen, err := g.frozen()
		if err == nil && !frozen && g.v1Freezer() {
			// A v1 group stays FREEZING when a task did not stop the
			// first time; writing FROZEN again retries those tasks.
			err = g.setFrozen(true)
		}
		return frozen, err
	})
	if err == nil && !done {
		err = fmt.Errorf("not frozen after %v", freezeTimeout)
	}
	if err != nil {
		_ = g.setFrozen(false)
		return fmt.Errorf("cgroups: freeze %s: %w", filepath.Dir(g.freeze.file), err)
	}
	return nil
}

// Thaw lets the processes of a group Freeze stopped go on.
func (g *Group) Thaw() error {
	if g.freeze.file == "" {
		return fmt.Errorf("cgroups: thaw: %w", tagged{errors.New("the group has no freezer"), ErrNotSupported})
	}
	if err := g.setFrozen(false); err != nil {
		return fmt.Errorf("cgroups: thaw: %w", classify(err))
	}
	return nil
}

// freezeTimeout bounds how long Freeze waits for the group to be frozen.
const freezeTimeout = 5 * time.Second

// v1Freezer reports whether the group's freezer is a v1 one.
func (g *Group) v1Freezer() bool { return strings.HasSuffix(g.freeze.file, "/freezer.state") }

// frozen reports whether the kernel has frozen every process of the group.
func (g *Group) frozen() (bool, error) {
	if g.v1Freezer() {
		b, err := os.ReadFile(g.freeze.file)
		if err != nil {
			return false, err
		}
		return strings.TrimSpace(string(b)) == g.freeze.on, nil
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(g.freeze.file), "cgroup.events"))
	if err != nil {
		return false, err
	}
	return parseCounter(string(b), "frozen") == 1, nil
}

// procs lists the processes in any of the group's directories.
func (g *Group) procs() ([]int, error) {
	var all []int
	for _, d := range g.dirs {
		pids, err := readPids(d + "/cgroup.procs")
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		all = append(all, pids...)
	}
	return all, nil
}

// Destroy kills whatever is left in the group and removes its directories.
func (g *Group) Destroy() error {
	g.mu.Lock()
	if g.hasFD {
		unix.Close(g.fd)
		g.hasFD = false
	}
	g.mu.Unlock()
	left, err := g.rmdirs(g.dirs)
	if err == nil && len(left) > 0 {
		if err = g.killAll(); err == nil {
			err = poll(func() (bool, error) {
				left, err = g.rmdirs(left)
				return len(left) == 0, err
			})
		}
	}
	if err != nil {
		return fmt.Errorf("cgroups: destroy: %w", err)
	}
	return nil
}

// rmdirs removes dirs and returns those still busy with processes.
func (g *Group) rmdirs(dirs []string) (busy []string, err error) {
	for _, d := range dirs {
		switch e := unix.Rmdir(d); e {
		case nil, unix.ENOENT:
		case unix.EBUSY:
			busy = append(busy, d)
		default:
			err = errors.Join(err, &fs.PathError{Op: "rmdir", Path: d, Err: e})
		}
	}
	return busy, err
}

// poll calls step, sleeping a little longer each time, until it is done,
// fails, or killTimeout passes.
func poll(step func() (bool, error)) error {
	done, err := pollFor(killTimeout, step)
	if err == nil && !done {
		err = fmt.Errorf("processes still in the group after %v", killTimeout)
	}
	return err
}

// pollFor calls step like poll, for up to timeout, and reports whether it
// got done.
func pollFor(timeout time.Duration, step func() (bool, error)) (bool, error) {
	deadline := time.Now().Add(timeout)
	for delay := 20 * time.Microsecond; ; delay = min(2*delay, 10*time.Millisecond) {
		done, err := step()
		if done || err != nil {
			return done, err
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		time.Sleep(delay)
	}
}

// counter is a number Stats adds to dst: dir/file holds just the number, or
// lines "KEY NUMBER" of which key names it.
type counter struct {
	dir, file, key string
	dst            *int64
}

// Stats reads what the kernel counted for the group's memory and pids.
func (g *Group) Stats() (Stats, error) {
	var s Stats
	var cs []counter
	switch {
	case g.memory == "":
	case g.memory == g.v2:
		cs = append(cs,
			counter{g.memory, "memory.current", "", &s.MemoryCurrent},
			counter{g.memory, "memory.peak", "", &s.MemoryPeak},
			counter{g.memory, "memory.events", "max", &s.MemoryLimitHits},
			counter{g.memory, "memory.events", "oom_kill", &s.OOMKills})
	default:
		cs = append(cs,
			counter{g.memory, "memory.usage_in_bytes", "", &s.MemoryCurrent},
			counter{g.memory, "memory.max_usage_in_bytes", "", &s.MemoryPeak},
			counter{g.memory, "memory.failcnt", "", &s.MemoryLimitHits},
			counter{g.memory, "memory.memsw.failcnt", "", &s.MemoryLimitHits}, // a charge fails on one of the two
			counter{g.memory, "memory.oom_control", "oom_kill", &s.OOMKills})
	}
	if g.pids != "" {
		cs = append(cs,
			counter{g.pids, "pids.current", "", &s.PidsCurrent},
			counter{g.pids, "pids.events", "max", &s.PidsLimitHits})
	}
	if err := readCounters(cs); err != nil {
		return Stats{}, err
	}
	return s, nil
}

// usageFile is one file Usage may read a field from: the number alone,
// or on the line "key N", times scale.
type usageFile struct {
	file, key string
	scale     int64
}

// The files of each field of Usage, v2's first: Usage reads a field from
// the first of them that exists in any of the group's directories.
var (
	cpuFiles   = []usageFile{{"cpu.stat", "usage_usec", 1000}, {"cpuacct.usage", "", 1}}
	memFiles   = []usageFile{{"memory.current", "", 1}, {"memory.usage_in_bytes", "", 1}}
	cacheFiles = []usageFile{{"memory.stat", "file", 1}, {"memory.stat", "cache", 1}}
	anonFiles  = []usageFile{{"memory.stat", "anon", 1}, {"memory.stat", "rss", 1}}
)

// Usage reads what the group's processes use now (see Usage): from
// whichever of its directories has the files, so that a Group from Named
// (the one runsc made for a gVisor sandbox, in the hierarchies runsc
// uses) is read as well as one Create made. The v2 cpu.stat counts the
// group's CPU time on a hybrid machine too, where the v2 directory holds
// every process of the group.
func (g *Group) Usage() (Usage, error) {
	var u Usage
	read := map[string]string{} // memory.stat is read once for the cache and anon
	for _, f := range []struct {
		files []usageFile
		dst   *int64
	}{{cpuFiles, &u.CPU}, {memFiles, &u.Memory}, {cacheFiles, &u.MemoryCache}, {anonFiles, &u.MemoryAnon}} {
		n, err := g.readUsage(f.files, read)
		if err != nil {
			return Usage{}, fmt.Errorf("cgroups: usage: %w", err)
		}
		*f.dst = n
	}
	return u, nil
}

// readUsage reads the first of files that exists in one of the group's
// directories (0 when none does); read keeps what it read, by path, for
// the next call.
func (g *Group) readUsage(files []usageFile, read map[string]string) (int64, error) {
	for _, f := range files {
		for _, d := range g.dirs {
			path := filepath.Join(d, f.file)
			text, ok := read[path]
			if !ok {
				b, err := os.ReadFile(path)
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				if err != nil {
					return 0, err
				}
				text = string(b)
				read[path] = text
			}
			if f.key != "" && !hasKey(text, f.key) {
				continue
			}
			return parseCounter(text, f.key) * f.scale, nil
		}
	}
	return 0, nil
}

// hasKey reports whether text has a line "key N".
func hasKey(text, key string) bool {
	for line := range strings.Lines(text) {
		if k, _, ok := strings.Cut(line, " "); ok && k == key {
			return true
		}
	}
	return false
}

// OOMKills is what Stats reports as OOMKills, read from the one file that
// counts it: for a poller that asks nothing else. 0 without a memory
// controller in the group.
func (g *Group) OOMKills() (int64, error) {
	var n int64
	switch {
	case g.memory == "":
		return 0, nil
	case g.memory == g.v2:
		return n, readCounters([]counter{{g.memory, "memory.events", "oom_kill", &n}})
	default:
		return n, readCounters([]counter{{g.memory, "memory.oom_control", "oom_kill", &n}})
	}
}

// MemoryLimitHits counts the times the group's memory use reached its
// limit (memory.events' "max" in v2, memory.failcnt in v1); 0 without a
// memory controller.
func (g *Group) MemoryLimitHits() (int64, error) {
	switch {
	case g.memory == "":
		return 0, nil
	case g.memory == g.v2:
		var n int64
		return n, readCounters([]counter{{g.memory, "memory.events", "max", &n}})
	}
	b, err := os.ReadFile(filepath.Join(g.memory, "memory.failcnt"))
	if err != nil {
		return 0, fmt.Errorf("cgroups: stats: %w", err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cgroups: memory.failcnt: %w", err)
	}
	return n, nil
}

// readCounters adds each counter's value to its destination, reading every
// file once; a file an older kernel lacks counts as 0.
func readCounters(cs []counter) error {
	texts := map[string]string{}
	for _, c := range cs {
		p := filepath.Join(c.dir, c.file)
		text, ok := texts[p]
		if !ok {
			b, err := os.ReadFile(p)
			if err != nil && !errors.Is(err, fs.ErrNotExist) { // older kernels lack some files: leave those zero
				return fmt.Errorf("cgroups: stats: %w", err)
			}
			text = string(b)
			texts[p] = text
		}
		*c.dst += parseCounter(text, c.key)
	}
	return nil
}

// writeFile writes value to an existing file, in one write as cgroupfs
// wants.
func writeFile(path, value string) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	for {
		_, err := unix.Write(fd, []byte(value))
		switch {
		case err == unix.EINTR:
			// cgroup v1 refuses a memory limit while a signal is pending
			// (the Go runtime's preemption signal, say): write again, as
			// package os does.
			continue
		case err != nil:
			return &fs.PathError{Op: "write", Path: path, Err: err}
		}
		return nil
	}
}

func readPids(path string) ([]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", path, err)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// classify tags err with ErrPermission or ErrNotSupported when it says the
// caller may not, or the kernel cannot.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrPermission), errors.Is(err, unix.EROFS):
		return tagged{err, ErrPermission}
	case errors.Is(err, fs.ErrNotExist):
		return tagged{err, ErrNotSupported}
	}
	return err
}

// Named returns the group called name that Create or CreateAlways made
// beneath the caller's own cgroup, in every hierarchy where its directory
// exists: for a group whose Group was lost with its process (a daemon that
// died), even once every process in it is gone. Destroy then kills what is
// left in it, frozen or not, and removes it. A name without directories
// gives a Group whose methods do nothing.
func Named(name string) (*Group, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	info, err := layout()
	if err != nil {
		return nil, err
	}
	exists := func(own string) string {
		if own == "" {
			return ""
		}
		dir := filepath.Join(unsupervised(own), name)
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			return dir
		}
		return ""
	}
	v1 := map[string]string{}
	for c, where := range info.Controllers {
		if where.Version == 1 {
			if dir := exists(where.Path); dir != "" {
				v1[c] = dir
			}
		}
	}
	return found(exists(info.Unified), v1), nil
}

// Own returns the Group of the caller's own cgroup, in every hierarchy it
// is in (in a container with a cgroup namespace of its own: the
// container's), for what the caller and every process of that cgroup use
// (Usage). It is not the caller's to destroy or kill.
func Own() (*Group, error) {
	info, err := layout()
	if err != nil {
		return nil, err
	}
	v1 := map[string]string{}
	for c, where := range info.Controllers {
		if where.Version == 1 {
			v1[c] = unsupervised(where.Path)
		}
	}
	v2 := ""
	if info.Unified != "" {
		v2 = unsupervised(info.Unified)
	}
	return found(v2, v1), nil
}

// unsupervised is own, the caller's cgroup in a hierarchy, or its parent
// when the caller moved out of it into the supervisor leaf (enable).
func unsupervised(own string) string {
	if filepath.Base(own) == supervisor {
		return filepath.Dir(own)
	}
	return own
}

// found is the Group of existing directories: v2 ("" for none) and those of
// the v1 controllers in v1.
func found(v2 string, v1 map[string]string) *Group {
	g := &Group{}
	if v2 != "" {
		g.dirs, g.v2, g.kill = []string{v2}, v2, v2+"/cgroup.kill"
		if v2Freezes(v2) {
			g.freeze = freezer{v2 + "/cgroup.freeze", "1", "0"}
		}
		if _, err := os.Stat(v2 + "/memory.events"); err == nil {
			g.memory = v2
		}
	}
	for _, c := range slices.Sorted(maps.Keys(v1)) {
		dir := v1[c]
		if !slices.Contains(g.dirs, dir) {
			g.dirs = append(g.dirs, dir)
		}
		if c == "freezer" && g.freeze.file == "" {
			g.freeze = freezer{dir + "/freezer.state", "FROZEN", "THAWED"}
		}
		if c == "memory" && g.memory == "" {
			g.memory = dir
		}
	}
	return g
}
