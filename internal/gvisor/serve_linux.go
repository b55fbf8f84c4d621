package gvisor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/cgroups"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/relay"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// Start starts a long-lived sandbox under gVisor for hutch serve, with
// hutch's agent as its PID 1 (inside gVisor's kernel), serving the agent
// protocol on a socket that is its stdin (runsc gives a restored sandbox
// its standard streams again, and no other host descriptor): the
// contract of sandbox.Start. The sandbox's root is the namespace tier's
// writable root layer (c.RootLayer: the host's root or an
// image's layers, read-only, under a tmpfs of the layer's size, with the
// workspace made in it and the host's private directories hidden),
// attached on the host where runsc's gofer serves it, its ids mapped as
// in the namespace tier (0–65535 onto sandbox.RootMappedID and up). The
// agent runs as the sandbox's root with sandbox.RootCapabilities (with
// c.RootCaps) in gVisor's kernel; nothing it writes reaches the host.
//
// Without a root layer (hutch mcp's sandboxes) the sandbox's view is
// Run's, the host's (or c.Image's root with the host's workspace), with
// the agent as the workspace's owner (or the image's user) without
// capabilities (startHost); it cannot be checkpointed.
//
// runsc run stays attached to hutch, its pid the instance's PID: killing
// it ends the sandbox (S4). With c.AgentSocket (and c.AgentToken) the
// sandbox outlives hutch instead, for a later one to take again
// (Reattach; lasting_linux.go): runsc runs detached, the instance's PID is
// gVisor's Sentry's, and the agent listens for the next daemon on a socket
// of the host's, linked at c.AgentSocket. Freeze and Thaw are runsc pause and resume;
// Checkpoint saves the sandbox to disk and ends it, and Restore starts it
// again from there.
func (rt *Runtime) Start(c sandbox.Config) (sandbox.Instance, error) {
	return rt.start(c, "", false)
}

// Reboot starts afresh a sandbox that Checkpoint saved in dir, with c as
// its configuration (as Restore's): a new kernel (a new boot ID, uptime
// from zero) and c's command run anew, over a root layer that holds the
// files the saved sandbox wrote; the saved memory is not read. dir is
// left as it is.
func (rt *Runtime) Reboot(c sandbox.Config, dir string) (sandbox.Instance, error) {
	return rt.start(c, dir, true)
}

// start is Start, or with saved (a directory Checkpoint wrote) Restore,
// or with cold too Reboot.
func (rt *Runtime) start(c sandbox.Config, saved string, cold bool) (inst sandbox.Instance, err error) {
	s := c.Spec
	log := c.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := rt.check(c); err != nil {
		return nil, err
	}
	if len(c.Volumes) > 0 {
		if c.RootLayer == nil {
			return nil, errors.New("volumes need a writable root layer")
		}
		if err := sandbox.CheckVolumes(c.Volumes, s.Filesystem.Workspace); err != nil {
			return nil, err
		}
	}
	if c.RootLayer == nil && saved == "" {
		return rt.startHost(c, log)
	}
	if c.RootLayer == nil || c.Image != nil {
		return nil, fmt.Errorf("tier %q: a long-lived sandbox needs a writable root layer", policy.TierGVisor)
	}
	l := *c.RootLayer
	if min(l.UID, l.GID) < 0 || max(l.UID, l.GID) >= sandbox.LayerIDs {
		return nil, fmt.Errorf("the workspace's owner %d:%d: a root layer maps ids 0–%d only", l.UID, l.GID, sandbox.LayerIDs-1)
	}

	base := rt.StateDir
	if base == "" {
		base = DefaultStateDir
	}
	sweep(base, rt.Runsc, log)
	var sv savedSandbox
	if saved != "" {
		if sv, err = readSaved(saved); err != nil {
			return nil, err
		}
	}
	id := "hutch-" + sandbox.RandomID()
	dir, err := makePrivateDir(base, id)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			cleanup(rt.Runsc, dir, id, log)
		}
	}()
	state := filepath.Join(dir, "state")

	v := view{args: []string{sandbox.SandboxHutch, "agent", "--stdin"}, env: c.Environ}
	v.rootfs = filepath.Join(dir, "rootfs")
	if err := os.Mkdir(v.rootfs, 0o755); err != nil {
		return nil, fmt.Errorf("root: %w", err)
	}
	root := "/"
	if s.Root != "" && s.Root != policy.DefaultRoot && len(l.Lowers) == 0 {
		root = s.Root
	}
	// The layer's tmpfs stays reachable, for Checkpoint to save what the
	// sandbox wrote; a restored sandbox's layer is the one saved.
	l.Keep = filepath.Join(dir, layerDir)
	if err := os.Mkdir(l.Keep, 0o700); err != nil {
		return nil, fmt.Errorf("root: %w", err)
	}
	if saved != "" && !sv.NoLayer {
		l.From = filepath.Join(saved, savedLayer)
	}
	if err := sandbox.MountLayerRoot(v.rootfs, root, &l, nil, s.Filesystem.Workspace); err != nil {
		return nil, err
	}
	if v.volumes, err = volumeMounts(dir, v.rootfs, c.Volumes); err != nil {
		return nil, err
	}
	if err := bindHutch(&v, dir, c.AgentBinary); err != nil {
		return nil, err
	}
	v.empty = filepath.Join(dir, "empty")
	if err := os.WriteFile(v.empty, nil, 0o444); err != nil {
		return nil, fmt.Errorf("mask file: %w", err)
	}
	// The deny-read paths the layer shows (it hides the host's private
	// directories and removes its closed files already): sockets, fifos
	// and devices masked on the host, in the layer's mount; files and
	// directories by the spec.
	if v.special, err = maskSpecial(v.rootfs, v.empty, s.Filesystem.DenyRead, nil); err != nil {
		return nil, err
	}
	masks, err := layerMasks(v.rootfs, v.empty, s.Filesystem.DenyRead, v.special)
	if err != nil {
		return nil, err
	}
	lasting := c.AgentSocket != ""
	if lasting {
		if saved != "" {
			return nil, errors.New("a sandbox started from a checkpoint cannot outlive hutch")
		}
		if c.AgentToken == "" {
			return nil, errors.New("agent socket: no token")
		}
		if err := lastingView(&v, dir, c.AgentToken); err != nil {
			return nil, err
		}
	}
	if s.Network.Mode == "proxy" {
		if err := proxyView(&v, dir, s.Network.Mode, c, true); err != nil {
			return nil, err
		}
		v.args = append(v.args, "--relay", relay.SandboxDir)
	} else {
		v.env = sandbox.ProxyEnviron(v.env, s.Network.Mode)
	}
	if s.Resources.MemoryBytes > 0 || s.Resources.CPUs > 0 || c.Cgroup {
		name := c.CgroupName
		if name == "" {
			name = id
		}
		v.cgroup = name
	}
	spec, err := json.MarshalIndent(servedSpec(s, v, masks, c.RootCaps), "", " ")
	if err != nil {
		return nil, err
	}
	wasLasting := false
	if saved != "" && !cold {
		// The spec the sandbox was saved with, whose mounts the
		// checkpoint holds, in this state directory: the view made above
		// is the same, made the same way.
		if spec, err = savedSpec(saved, sv.Dir, dir); err != nil {
			return nil, err
		}
		// One that was to outlive hutch binds its agent's directory,
		// where it listens no more (lasting_linux.go), and runsc restores
		// it with the flags it ran with.
		if wasLasting = bytes.Contains(spec, []byte(`"`+agentAt+`"`)); wasLasting {
			if err := restoredAgentDir(filepath.Join(dir, agentDir)); err != nil {
				return nil, err
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), spec, 0o600); err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}

	logFile := filepath.Join(dir, "runsc.log")
	sb := &served{runsc: rt.Runsc, dir: dir, id: id, state: state, logFile: logFile, log: log, proxy: c.Proxy, cgroup: v.cgroup, pidfd: -1}
	sb.flags = runscArgs(state, logFile, v.netDir != "", lasting || wasLasting, v.cgroup != "")
	if lasting {
		args := append(slices.Clip(sb.flags), "run", "--detach", "--bundle", dir, id)
		if err := sb.launchDetached(args, c.AgentSocket); err != nil {
			if sb.pidfd >= 0 {
				_ = unix.PidfdSendSignal(sb.pidfd, unix.SIGKILL, nil, 0)
				unix.Close(sb.pidfd)
			}
			if sb.conn != nil {
				sb.conn.Close()
			}
			return nil, err
		}
		return sb, nil
	}
	args := append(slices.Clip(sb.flags), "run", "--bundle", dir, id)
	if saved != "" && !cold {
		args = append(slices.Clip(sb.flags), "restore", "--image-path", filepath.Join(saved, savedImage), "--bundle", dir, id)
	}
	if err := sb.launch(args); err != nil {
		return nil, err
	}
	return sb, nil
}

// launch runs runsc with args (run or restore), the agent's socket its
// stdin.
func (s *served) launch(args []string) error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("agent socketpair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "hutch-agent"), os.NewFile(uintptr(fds[1]), "hutch-agent-sandbox")
	defer theirs.Close()
	conn, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return fmt.Errorf("agent connection: %w", err)
	}
	s.out = &tail{max: 8 << 10}
	cmd := exec.Command(s.runsc, args...)
	cmd.Dir = s.dir
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	// The socket is the agent's stdin in gVisor (agent --stdin).
	cmd.Stdin, cmd.Stdout, cmd.Stderr = theirs, s.out, s.out
	// runsc runs its sandbox attached: its Sentry and gofer die with it,
	// and it dies with hutch (S4).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	s.log.Debug("gvisor: starting a served sandbox", "runsc", s.runsc, "args", args)
	if err := cmd.Start(); err != nil {
		conn.Close()
		return fmt.Errorf("start runsc: %w", err)
	}
	s.cmd, s.conn, s.done = cmd, conn, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		s.code = cmd.ProcessState.ExitCode()

		if s.cgroup != "" {
			// runsc run has ended the container; its cgroup may be left
			// until runsc delete, with the count of OOM kills in it.
			if g, err := cgroups.Named(s.cgroup); err == nil {
				s.oomKills, _ = g.OOMKills()
			}
		}
		close(s.done)
	}()
	return nil
}

// runscArgs are runsc's flags for a sandbox whose state is in state and
// whose log goes to logFile: no network of gVisor's own, no overlay over
// the prepared root, the OCI spec's seccomp filter, the file system
// served without direct host access; hostUDS lets the sandbox connect to
// the host's unix sockets its view shows (the proxy's), bindUDS lets it
// make unix sockets the host can connect to (its agent's, in a sandbox
// that outlives hutch), cgroup makes the spec's cgroup.
func runscArgs(state, logFile string, hostUDS, bindUDS, cgroup bool) []string {
	args := []string{
		"--root", state, "--log", logFile, "--log-format=json",
		"--network=none", "--overlay2=none", "--oci-seccomp",
		// S1: without direct access to files the Sentry and the stub
		// processes that run the command are host nobody without any
		// capability (with it, root in a user namespace that maps every id,
		// with CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_FSETID …).
		"--directfs=false",
	}
	switch {
	case hostUDS && bindUDS:
		args = append(args, "--host-uds=all")
	case hostUDS:
		// The proxy's sockets: the sandbox may connect to a host socket
		// its view shows (only those, in a read-only directory of
		// root's), and never make one ("create", "all").
		args = append(args, "--host-uds=open")
	case bindUDS:
		// The agent's socket, which the host connects to (lastingView):
		// a socket the sandbox binds in a directory of the host's that
		// its view shows is made on the host.
		args = append(args, "--host-uds=create")
	default:
		args = append(args, "--host-uds=none")
	}
	if !cgroup {
		args = append(args, "--ignore-cgroups")
	}
	return args
}

// layerMasks are the spec's masks of the deny-read paths the layered
// root at rootfs shows: an empty read-only tmpfs over a directory, the
// empty file over anything else (special files, masked on the host
// already, are left out). A path is looked up in the root, never through
// a symbolic link out of it.
func layerMasks(rootfs, empty string, denyRead []string, special map[string]bool) ([]ociMount, error) {
	rfd, err := unix.Open(rootfs, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("deny read: the root: %w", err)
	}
	defer unix.Close(rfd)
	var m []ociMount
	for _, d := range denyRead {
		if special[d] || !filepath.IsAbs(d) {
			continue
		}
		fd, err := unix.Openat2(rfd, strings.TrimPrefix(d, "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			continue // not in the view
		} else if err != nil {
			return nil, fmt.Errorf("deny read %s: %w", d, err)
		}
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		unix.Close(fd)
		if err != nil {
			return nil, fmt.Errorf("deny read %s: %w", d, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			m = append(m, tmpfsMount(d, 0, true))
		} else {
			m = append(m, bindMount(empty, d, true))
		}
	}
	return m, nil
}

// servedSpec writes the OCI spec of a served sandbox of spec s: the
// agent, the sandbox's root, in the layered root with the sandbox's own
// /tmp and /dev/shm, the deny-read masks, and the proxy's mounts.
func servedSpec(s policy.Spec, v view, masks []ociMount, rootCaps bool) ociSpec {
	umask := uint32(0o022)
	var caps []string
	if rootCaps {
		for _, c := range sandbox.RootCapabilities {
			caps = append(caps, "CAP_"+strings.ToUpper(c))
		}
	}
	o := ociSpec{
		Version:  "1.0.2",
		Hostname: sandbox.Hostname,
		Root:     ociRoot{Path: v.rootfs},
		Process: ociProcess{
			User: ociUser{UID: 0, GID: 0, Umask: &umask},
			Args: v.args,
			Env:  v.env,
			Cwd:  s.Filesystem.Workspace,
			Capabilities: ociCapabilities{
				Bounding: caps, Effective: caps, Inheritable: []string{}, Permitted: caps, Ambient: []string{},
			},
			NoNewPrivileges: true,
		},
		Linux: ociLinux{
			Namespaces: []ociNamespace{{"pid"}, {"network"}, {"ipc"}, {"uts"}, {"mount"}, {"user"}},
			// The layer's ids, as in the namespace tier: a file of host
			// (or image) id N shows as N's, and the sandbox's ids are host
			// ids of no one's.
			UIDMappings: []ociIDMapping{{ContainerID: 0, HostID: sandbox.RootMappedID, Size: sandbox.LayerIDs}},
			GIDMappings: []ociIDMapping{{ContainerID: 0, HostID: sandbox.RootMappedID, Size: sandbox.LayerIDs}},
		},
	}
	if caps == nil {
		o.Process.Capabilities = ociCapabilities{Bounding: []string{}, Effective: []string{}, Inheritable: []string{}, Permitted: []string{}, Ambient: []string{}}
	}
	limits(&o, s.Resources, v.cgroup)
	r := s.Resources
	m := []ociMount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		tmpfsMount("/tmp", r.TmpBytes, false),
		tmpfsMount("/dev/shm", r.TmpBytes, false),
		bindMount(v.hutch, sandbox.SandboxHutch, true),
	}
	m = append(m, masks...)
	if v.netDir != "" {
		m = append(m, netMounts(v)...)
	}
	if v.agentDir != "" {
		m = append(m, bindMount(v.agentDir, agentAt, false))
	}
	// Last: a volume hides what the view has at its path.
	m = append(m, v.volumes...)
	o.Mounts = m
	return o
}

// volumesDir is where, in a served sandbox's bundle directory, its
// volumes' idmapped mounts are attached, one directory each (by index).
const volumesDir = "volumes"

// volumeMounts attaches the idmapped mount of each volume's host
// directory (sandbox.MountVolume) at dir/volumes/N, on a tmpfs of its own
// there (unbindable, as the writable areas' of areaMounts; cleanup
// unmounts it, and the volumes with it), makes its mount point in the
// sandbox's root at rootfs with no symbolic link on the way
// (sandbox.MakeMountPoint: gVisor's gofer would follow one in the view),
// and returns the spec's binds of them, read-write, nosuid and nodev.
// The paths are the same at every start of the sandbox, as a restore's
// saved spec needs.
func volumeMounts(dir, rootfs string, vols []sandbox.Volume) ([]ociMount, error) {
	if len(vols) == 0 {
		return nil, nil
	}
	base := filepath.Join(dir, volumesDir)
	if err := os.Mkdir(base, 0o711); err != nil {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	if err := unix.Mount("hutch-volumes", base, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0711,size=64k"); err != nil {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	if err := unix.Mount("", base, "", unix.MS_UNBINDABLE, ""); err != nil {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	var m []ociMount
	for i, vol := range vols {
		if err := sandbox.MakeMountPoint(rootfs, vol.At); err != nil {
			return nil, fmt.Errorf("volume at %s: %w", vol.At, err)
		}
		target := filepath.Join(base, strconv.Itoa(i))
		if err := os.Mkdir(target, 0o700); err != nil {
			return nil, fmt.Errorf("volume at %s: %w", vol.At, err)
		}
		if err := sandbox.MountVolume(target, vol.Dir); err != nil {
			return nil, fmt.Errorf("volume at %s: %w", vol.At, err)
		}
		m = append(m, bindMount(target, vol.At, false))
	}
	return m, nil
}

// served is a long-lived sandbox under gVisor.
type served struct {
	runsc, dir, id, state, logFile string
	flags                          []string    // runsc's global flags (runscArgs)
	cgroup                         string      // the spec's cgroup, "" for none
	cmd                            *exec.Cmd   // runsc run; nil for a sandbox that outlives hutch
	pid, pidfd                     int         // its Sentry's pid and pidfd, for a sandbox that outlives hutch
	waiter                         *os.Process // its runsc wait
	released                       atomic.Bool // let go of (Release)
	conn                           net.Conn
	out                            *tail
	log                            *slog.Logger
	proxy                          sandbox.Proxy // closed with the sandbox; nil for none
	host                           *hostBundle   // the host's view (startHost), undone with the sandbox; nil for a root layer
	warn                           io.Writer     // where Close reports what the host's view set aside (startHost)
	reattached                     bool          // taken again from a hutch that is gone (Reattach)
	done                           chan struct{}
	code                           int   // runsc run's exit code, once done is closed
	oomKills                       int64 // OOM kills in its cgroup when it ended, if it was still there
	limitHits                      int64 // times its memory reached its limit, when it ended with its status unknown
	closing                        atomic.Bool
	once                           sync.Once
}

var _ sandbox.Instance = (*served)(nil)

// Conn is the connection to the agent.
func (s *served) Conn() net.Conn { return s.conn }

// PID is the host pid of runsc run, which holds the sandbox, or of the
// Sentry of one that outlives hutch: killing it ends the sandbox.
func (s *served) PID() int {
	if s.cmd == nil {
		return s.pid
	}
	return s.cmd.Process.Pid
}

// Done is closed when the sandbox has ended.
func (s *served) Done() <-chan struct{} { return s.done }

// ExitCode is the agent's exit code, as runsc run (or runsc wait)
// passes it on; -1 when it is unknown.
func (s *served) ExitCode() int {
	<-s.done
	return s.code
}

// Dropped is empty: the tier sets up every layer or fails.
func (s *served) Dropped() []string { return nil }

// Usage is what the sandbox uses now, read from the cgroup runsc made for
// it (gVisor's Sentry, gofer and the sandbox's memory are all in it), in
// the hierarchies runsc uses: zero without one.
func (s *served) Usage() (cgroups.Usage, error) {
	if s.cgroup == "" {
		return cgroups.Usage{}, nil
	}
	g, err := cgroups.Named(s.cgroup)
	if err != nil {
		return cgroups.Usage{}, err
	}
	return g.Usage()
}

// Freeze stops every task of the sandbox (runsc pause).
func (s *served) Freeze() error { return s.runscDo("pause") }

// Thaw lets them go on (runsc resume).
func (s *served) Thaw() error { return s.runscDo("resume") }

// runscDo runs runsc's command what on the sandbox.
func (s *served) runscDo(what string) error {
	select {
	case <-s.done:
		return errors.New("the sandbox has ended")
	default:
	}
	cmd := exec.Command(s.runsc, "--root", s.state, what, s.id)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("runsc %s: %v: %s", what, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Close kills the sandbox (runsc run, and with it gVisor's Sentry, gofer
// and every task, or the Sentry of a sandbox that outlives hutch) and
// removes what the host holds for it.
func (s *served) Close() error {
	s.closing.Store(true)
	s.once.Do(func() {
		s.kill()
		<-s.done
		if s.cmd == nil {
			unix.Close(s.pidfd)
		}
		s.conn.Close()
		if s.proxy != nil {
			_ = s.proxy.Close()
		}
		if s.host != nil {
			// As the namespace tier's served sandbox does at its end.
			for _, line := range sandbox.SetAsideReport(s.host.close()) {
				fmt.Fprintln(s.warn, line)
			}
		} else {
			cleanup(s.runsc, s.dir, s.id, s.log)
		}
	})
	return nil
}

// EndReason says why the sandbox ended on its own ("" while it runs, or
// when Close ended it): the host's OOM killer (gVisor has none of its own:
// a sandbox at its memory limit ends whole; oom is then set), a kill from
// the host, or runsc's own last words.
func (s *served) EndReason() (why string, oom bool) {
	select {
	case <-s.done:
	default:
		return "", false
	}
	switch {
	case s.closing.Load():
		return "", false
	case s.oomKills > 0:
		return "out of memory: the host's OOM killer ended gVisor's Sentry at the sandbox's memory limit", true
	case s.limitHits > 0:
		return "out of memory: gVisor's Sentry ended on the host after the sandbox reached its memory limit", true
	case s.code == 128+int(syscall.SIGKILL):
		// runsc has removed the cgroup by then, as a rule: a SIGKILL from
		// the host is the OOM killer's unless an operator sent it.
		return "out of memory: gVisor's Sentry was killed on the host (SIGKILL), by the OOM killer at the sandbox's memory limit unless an operator killed it", true
	case s.code != 0 && s.out.String() != "":
		return fmt.Sprintf("runsc ended with code %d: %s", s.code, s.out.String()), false
	}
	return "", false
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}
