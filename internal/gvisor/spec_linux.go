package gvisor

import (
	"fmt"
	"golang.org/x/sys/unix"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/mountinfo"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/relay"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// The OCI runtime spec, only the fields hutch writes (facts of the
// OCI runtime specification, which runsc reads).
type (
	ociSpec struct {
		Version  string     `json:"ociVersion"`
		Process  ociProcess `json:"process"`
		Root     ociRoot    `json:"root"`
		Hostname string     `json:"hostname"`
		Mounts   []ociMount `json:"mounts"`
		Linux    ociLinux   `json:"linux"`
	}
	ociProcess struct {
		Terminal        bool            `json:"terminal"`
		ConsoleSize     *ociBox         `json:"consoleSize,omitempty"`
		User            ociUser         `json:"user"`
		Args            []string        `json:"args"`
		Env             []string        `json:"env"`
		Cwd             string          `json:"cwd"`
		Capabilities    ociCapabilities `json:"capabilities"`
		Rlimits         []ociRlimit     `json:"rlimits,omitempty"`
		NoNewPrivileges bool            `json:"noNewPrivileges"`
	}
	ociBox struct {
		Height uint16 `json:"height"`
		Width  uint16 `json:"width"`
	}
	ociUser struct {
		UID            uint32   `json:"uid"`
		GID            uint32   `json:"gid"`
		Umask          *uint32  `json:"umask,omitempty"`
		AdditionalGids []uint32 `json:"additionalGids,omitempty"`
	}
	// ociCapabilities are all empty: the command holds no capability.
	ociCapabilities struct {
		Bounding    []string `json:"bounding"`
		Effective   []string `json:"effective"`
		Inheritable []string `json:"inheritable"`
		Permitted   []string `json:"permitted"`
		Ambient     []string `json:"ambient"`
	}
	ociRlimit struct {
		Type string `json:"type"`
		Hard uint64 `json:"hard"`
		Soft uint64 `json:"soft"`
	}
	ociRoot struct {
		Path     string `json:"path"`
		Readonly bool   `json:"readonly"`
	}
	ociMount struct {
		Destination string   `json:"destination"`
		Type        string   `json:"type"`
		Source      string   `json:"source"`
		Options     []string `json:"options,omitempty"`
	}
	ociLinux struct {
		Namespaces  []ociNamespace `json:"namespaces"`
		UIDMappings []ociIDMapping `json:"uidMappings,omitempty"`
		GIDMappings []ociIDMapping `json:"gidMappings,omitempty"`
		Resources   *ociResources  `json:"resources,omitempty"`
		CgroupsPath string         `json:"cgroupsPath,omitempty"`
		Seccomp     *ociSeccomp    `json:"seccomp,omitempty"`
	}
	ociNamespace struct {
		Type string `json:"type"`
	}
	ociIDMapping struct {
		ContainerID uint32 `json:"containerID"`
		HostID      uint32 `json:"hostID"`
		Size        uint32 `json:"size"`
	}
	ociResources struct {
		Memory *ociMemory `json:"memory,omitempty"`
		CPU    *ociCPU    `json:"cpu,omitempty"`
	}
	ociMemory struct {
		Limit int64 `json:"limit"`
	}
	ociCPU struct {
		Quota  int64  `json:"quota"`
		Period uint64 `json:"period"`
	}
)

// cpuPeriod is the CFS period of a CPU limit, in microseconds.
const cpuPeriod = 100_000

// view is what buildSpec needs besides the policy.
type view struct {
	args     []string
	agent    bool // args are hutch's agent, which relays the proxy itself
	env      []string
	uid, gid uint32
	home     string // the home directory, when it is the host's and not writable
	homeTmp  bool   // the home is an empty tmpfs of the sandbox's own
	prot     *sandbox.Protection
	rootfs   string // the host's root, read-only (sandbox.ReadOnlyHostRoot)
	empty    string // an empty, read-only host file: the mask of deny-read files
	// areas are where the writable areas (prot.Roots, same order) are
	// mounted idmapped (sandbox.MountIdmapped), reachable by gVisor's
	// gofer, whose host ids are those of the sandbox's user namespace.
	areas []string
	// onHost are the protected paths mounted on the host, in the areas
	// (sandbox.Protection.MountOver): the spec binds the areas with them.
	onHost map[string]bool
	// submounts are the host's mounts inside the writable areas, which
	// the spec binds again so that gVisor's kernel knows them as mount
	// points (with direct file access: see Run).
	submounts []mountinfo.Mount
	// shadows are the directories on the way to a writable area that the
	// command could not search, empty in the root's copy (shadowWays).
	shadows []string
	// special are the deny-read paths that are neither files nor
	// directories (unix sockets, fifos, device nodes), masked on the host
	// in the root's copy: gVisor's gofer cannot open them as mount points.
	special map[string]bool
	hide    []string // directories of hutch's own the view shows empty
	tty     bool
	rows    uint16
	cols    uint16
	// cgroup is the cgroup runsc makes for the limits, "" for none: a
	// name, relative to hutch's own cgroup (in every hierarchy), as the
	// namespace tier places its sandboxes' groups.
	cgroup string
	// umask is the command's umask; filter keeps what it writes to the
	// host from granting privilege there (ESCAPES 21).
	umask  uint32
	filter *ociSeccomp
	// With a proxy (proxyView): hutch's binary bound at
	// sandbox.SandboxHutch, the first process; the directory of the
	// proxy's sockets; hutch's resolv.conf and where it goes; the trust
	// bundle and where it goes.
	hutch, netDir    string
	resolv, resolvAt string
	// agentDir is the host directory where the agent of a sandbox that
	// outlives hutch binds its socket (lastingView), bound at agentAt.
	agentDir string
	bundle   string
	bundleAt []string
	// With an image as the root: the image; where the view shows the
	// workspace (sandbox.WorkspaceAt); the user's supplementary groups and
	// the image's working directory ("": the workspace).
	image       *sandbox.ImageRoot
	workspaceAt string
	groups      []int
	dir         string
	// volumes are the binds of a served sandbox's volumes (volumeMounts).
	volumes []ociMount
}

// buildSpec writes the OCI spec of a sandbox of spec s.
func buildSpec(s policy.Spec, v view) ociSpec {
	o := ociSpec{
		Version:  "1.0.2",
		Hostname: sandbox.Hostname,
		// Not "readonly": gVisor then makes every mount below the root
		// read-only, the writable areas too. The root is read-only on the
		// host instead, every mount of it.
		Root: ociRoot{Path: v.rootfs},
		Process: ociProcess{
			Terminal: v.tty,
			User:     ociUser{UID: v.uid, GID: v.gid, Umask: &v.umask},
			Args:     v.args,
			Env:      v.env,
			Cwd:      v.cwd(),
			Capabilities: ociCapabilities{
				Bounding: []string{}, Effective: []string{}, Inheritable: []string{}, Permitted: []string{}, Ambient: []string{},
			},
			NoNewPrivileges: true,
		},
		Linux: ociLinux{
			Namespaces: []ociNamespace{{"pid"}, {"network"}, {"ipc"}, {"uts"}, {"mount"}, {"user"}},
			// S1: the command's ids are host ids of no one's
			// (sandbox.RootMappedID), as in the namespace tier: the host's
			// files of its owner (root's, when root owns the workspace)
			// show as nobody's to it, and the writable areas, idmapped
			// (sandbox.MountIdmapped), show their owner's files as its own.
			UIDMappings: []ociIDMapping{{ContainerID: 0, HostID: sandbox.RootMappedID, Size: 65536}},
			GIDMappings: []ociIDMapping{{ContainerID: 0, HostID: sandbox.RootMappedID, Size: 65536}},
			Seccomp:     v.filter,
		},
	}
	if v.tty && v.rows > 0 && v.cols > 0 {
		o.Process.ConsoleSize = &ociBox{Height: v.rows, Width: v.cols}
	}
	for _, g := range v.groups {
		o.Process.User.AdditionalGids = append(o.Process.User.AdditionalGids, uint32(g))
	}
	if v.image != nil {
		o.Process.Env = append(withoutVar(o.Process.Env, "PWD"), "PWD="+o.Process.Cwd)
	}
	r := s.Resources
	limits(&o, r, v.cgroup)

	tmpfs, bind := tmpfsMount, bindMount
	m := []ociMount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		tmpfs("/tmp", r.TmpBytes, false),
		tmpfs("/dev/shm", r.TmpBytes, false),
	}
	if v.homeTmp && v.home != "" {
		home := tmpfs(v.home, r.TmpBytes, false)
		home.Options[2] = "mode=0700"
		home.Options = append(home.Options, "uid="+strconv.Itoa(int(v.uid)), "gid="+strconv.Itoa(int(v.gid)))
		m = append(m, home)
	}
	// hidden reports whether p is no longer the host's in the view: under
	// the sandbox's own /tmp or an empty home (unless in a writable area).
	hidden := func(p string) bool {
		for _, own := range []string{"/tmp", "/dev/shm"} {
			if within(p, own) {
				return true
			}
		}
		return v.homeTmp && v.home != "" && within(p, v.home)
	}
	// The writable areas, and what lies in them, come from their
	// idmapped mounts.
	pr := v.prot
	area := func(p string) string {
		for i, r := range pr.Roots {
			if within(p, r) && i < len(v.areas) {
				return filepath.Join(v.areas[i], strings.TrimPrefix(p, r))
			}
		}
		return p
	}
	for _, root := range pr.Roots {
		// With what is mounted in the area on the host: the protected
		// paths (sandbox.Protection.MountOver).
		a := bind(area(root), v.inView(root), false)
		a.Options[0] = "rbind"
		m = append(m, a)
	}
	for _, sm := range v.submounts {
		m = append(m, bind(area(sm.Point), v.inView(sm.Point), sm.ReadOnly()))
	}
	for _, p := range pr.Pin {
		if !v.onHost[p] {
			m = append(m, bind(area(p), v.inView(p), false))
		}
	}
	for _, p := range pr.ReadOnly {
		if !v.onHost[p] {
			m = append(m, bind(area(p), v.inView(p), true))
		}
	}
	for _, f := range pr.Files {
		if !v.onHost[f.Target] {
			m = append(m, bind(f.Source, v.inView(f.Target), true))
		}
	}
	for _, d := range v.hide {
		m = append(m, tmpfs(d, 0, true))
	}
	for _, d := range pr.DenyRead {
		if (hidden(d) || v.image != nil) && !inAny(d, pr.Roots) {
			continue // not in the view at all (an image shows nothing of the host's)
		}
		if !inAny(d, pr.Roots) && (!othersReach(d) || inAny(d, v.shadows)) {
			continue // out of the command's reach, and of gVisor's gofer
		}
		if v.special[d] {
			continue // masked on the host (maskSpecial)
		}
		if pr.Dirs[d] {
			m = append(m, tmpfs(v.inView(d), 0, true))
		} else {
			m = append(m, bind(v.empty, v.inView(d), true))
		}
	}
	if v.hutch != "" {
		m = append(m, bind(v.hutch, sandbox.SandboxHutch, true))
	}
	if v.netDir != "" {
		m = append(m, netMounts(v)...)
		if !v.agent {
			o.Process.Args = append([]string{sandbox.SandboxHutch, InitCommand, "--"}, v.args...)
		}
	}
	o.Mounts = m
	return o
}

// limits sets the spec's limits of r: RLIMIT_NPROC for the pids (gVisor
// counts the sandbox's tasks against it itself; a host cgroup's pids
// limit would count gVisor's own threads instead), and memory and CPU in
// cgroup, when it is set.
func limits(o *ociSpec, r policy.Resources, cgroup string) {
	if r.Pids > 0 {
		o.Process.Rlimits = append(o.Process.Rlimits, ociRlimit{Type: "RLIMIT_NPROC", Hard: uint64(r.Pids), Soft: uint64(r.Pids)})
	}
	if cgroup != "" {
		res := &ociResources{}
		if r.MemoryBytes > 0 {
			res.Memory = &ociMemory{Limit: r.MemoryBytes}
		}
		if r.CPUs > 0 {
			res.CPU = &ociCPU{Quota: int64(r.CPUs * cpuPeriod), Period: cpuPeriod}
		}
		o.Linux.Resources, o.Linux.CgroupsPath = res, cgroup
	}
}

// netMounts are the view's mounts of proxyView: the proxy's sockets,
// hutch's resolv.conf and the trust bundle.
func netMounts(v view) []ociMount {
	m := []ociMount{bindMount(v.netDir, relay.SandboxDir, true)}
	if v.resolv != "" {
		m = append(m, bindMount(v.resolv, v.resolvAt, true))
	}
	for _, t := range v.bundleAt {
		m = append(m, bindMount(v.bundle, t, true))
	}
	return m
}

// tmpfsMount is a tmpfs at dst of size bytes (no bound when 0), open to
// all (mode 1777), or an empty read-only one (ro).
func tmpfsMount(dst string, size int64, ro bool) ociMount {
	opts := []string{"nosuid", "nodev", "mode=1777"}
	if size > 0 {
		opts = append(opts, "size="+strconv.FormatInt(size, 10))
	}
	if ro {
		opts = []string{"ro", "nosuid", "nodev", "noexec", "mode=0755", "size=4096"}
	}
	return ociMount{Destination: dst, Type: "tmpfs", Source: "tmpfs", Options: opts}
}

// bindMount binds the host's src at dst, read-only (ro) or read-write.
func bindMount(src, dst string, ro bool) ociMount {
	opts := []string{"bind", "nosuid", "nodev"}
	if ro {
		opts = append(opts, "ro")
	} else {
		opts = append(opts, "rw")
	}
	return ociMount{Destination: dst, Type: "bind", Source: src, Options: opts}
}

// cwd is the command's working directory: the image's, or the workspace
// where the view shows it.
func (v *view) cwd() string {
	if v.dir != "" {
		return v.dir
	}
	return v.inView(v.prot.Spec.Filesystem.Workspace)
}

// withoutVar drops the variable name from env.
func withoutVar(env []string, name string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

func inAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if within(p, d) {
			return true
		}
	}
	return false
}

// lookPath finds the command as the sandbox will (the first entry of its
// PATH that is an executable file, in the view: the host's root, less
// the sandbox's own /tmp and the deny-read paths, or the image's root
// when root is set), so that a missing
// command exits 127 and one that cannot be executed 126, as in the
// namespace tier. runsc itself reports both only as its own failure.
func lookPath(name string, env []string, root string, hide func(string) bool) error {
	check := func(p string) (bool, error) {
		if hide(p) {
			return false, nil
		}
		var st unix.Stat_t
		var err error
		if root != "" {
			err = statIn(root, p, &st)
		} else {
			err = unix.Stat(p, &st)
		}
		if err != nil {
			return false, nil
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return true, fmt.Errorf("%s: cannot execute: is a directory", name)
		}
		if st.Mode&0o111 == 0 {
			return true, fmt.Errorf("%s: cannot execute: permission denied", name)
		}
		return true, nil
	}
	if strings.Contains(name, "/") {
		found, err := check(name)
		if !found {
			return &sandbox.InitError{Msg: name + ": command not found", Code: sandbox.ExitNotFound}
		}
		if err != nil {
			return &sandbox.InitError{Msg: err.Error(), Code: sandbox.ExitNotExecutable}
		}
		return nil
	}
	path := ""
	for _, kv := range env {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = p
		}
	}
	var firstErr error
	for _, dir := range filepath.SplitList(path) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		found, err := check(filepath.Join(dir, name))
		if found && err == nil {
			return nil
		}
		if found && firstErr == nil {
			firstErr = err
		}
	}
	if firstErr != nil {
		return &sandbox.InitError{Msg: firstErr.Error(), Code: sandbox.ExitNotExecutable}
	}
	return &sandbox.InitError{Msg: name + ": command not found", Code: sandbox.ExitNotFound}
}

// othersReach reports whether a user who owns none of p and its parent
// directories may reach p: each parent searchable by others, and p
// readable (a file) or searchable (a directory) by others.
func othersReach(p string) bool {
	var st unix.Stat_t
	if unix.Stat(p, &st) != nil {
		return false
	}
	need := uint32(0o004)
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		need = 0o001
	}
	if st.Mode&need == 0 {
		return false
	}
	for d := filepath.Dir(p); ; d = filepath.Dir(d) {
		var st unix.Stat_t
		if unix.Stat(d, &st) != nil || st.Mode&0o001 == 0 {
			return false
		}
		if d == "/" {
			return true
		}
	}
}
