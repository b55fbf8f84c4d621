package k8stest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// proc is a process of the cluster, its log in the cluster's logs/.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done <-chan struct{}
}

// tail is the end of the process's log.
func (p *proc) tail() string {
	f, err := os.Open(p.log)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	const max = 6000
	if fi, err := f.Stat(); err == nil && fi.Size() > max {
		f.Seek(fi.Size()-max, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// start starts one of the cluster's binaries in its own process group,
// killed if the test process dies.
func (c *Cluster) start(t testing.TB, name string, env []string, args ...string) *proc {
	t.Helper()
	return c.startCmd(t, name, env, filepath.Join(c.bin, name), args...)
}

// startInNamespace starts one of the cluster's binaries in the cluster's
// mount namespace.
func (c *Cluster) startInNamespace(t testing.TB, name string, env []string, args ...string) *proc {
	t.Helper()
	return c.startCmd(t, name, env, "nsenter", append([]string{fmt.Sprintf("--mount=/proc/%d/ns/mnt", c.mntns.cmd.Process.Pid), "--", filepath.Join(c.bin, name)}, args...)...)
}

func (c *Cluster) startCmd(t testing.TB, name string, env []string, prog string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, log: c.path(filepath.Join("logs", name+".log"))}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p.cmd = exec.Command(prog, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	done, err := testutil.StartLocked(p.cmd)
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p.done = done
	c.procs = append(c.procs, p)
	return p
}

// stop ends p with SIGTERM, SIGKILL after 30 s.
func (p *proc) stop(t testing.TB) {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Logf("k8stest: %s did not end within 30 s of SIGTERM; killing it", p.name)
		p.cmd.Process.Kill()
		<-p.done
	}
}

// devicePlugins is where every kubelet puts its device plugins' socket
// and checkpoint, whatever its --root-dir: each cluster's mount namespace
// has its own, so that the kubelets of clusters started at once do not
// take each other's socket.
const devicePlugins = "/var/lib/kubelet/device-plugins"

// startMountNamespace starts the process that holds the mount namespace
// of containerd and the kubelet: tmpfs on /run/containerd (shims'
// sockets, runc's state) and /var/log (the kubelet's
// /var/log/containers), and kubeletSysctls bound over /proc/sys. Its
// propagation is slave: what it mounts stays in it, and what the host
// unmounts is unmounted in it too — a private copy would keep every mount
// the host had when it was made (other tests' containers' roots) busy
// until the cluster ends, and their engines could not remove them.
func (c *Cluster) startMountNamespace(t testing.TB) {
	t.Helper()
	for _, d := range []string{"/run/containerd", devicePlugins} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	script := `set -e
mount -t tmpfs -o mode=0711 hutch-k8s /run/containerd
mount -t tmpfs -o mode=0755 hutch-k8s /var/log
mount -t tmpfs -o mode=0755 hutch-k8s ` + devicePlugins + `
for f in "$1"/*; do
	mount --bind "$f" "/proc/sys/$(basename "$f" | tr . /)"
done
# A proc of this namespace's with nothing over it: the kernel lets a user
# namespace (a container's of hutch-runc) mount proc only where one is
# fully visible, which the binds above make /proc not.
mkdir -p /run/containerd/.proc
mount -t proc -o nosuid,nodev,noexec proc /run/containerd/.proc
echo ready
exec sleep 2147483647
`
	p := &proc{name: "mount namespace", log: c.path("logs/mntns.log")}
	p.cmd = exec.Command("unshare", "--mount", "--propagation", "slave", "--", "/bin/sh", "-c", script, "sh", c.path("sysctl"))
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var errb testutil.Buffer
	p.cmd.Stderr = &errb
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	done, err := testutil.StartLocked(p.cmd)
	if err != nil {
		t.Fatalf("unshare: %v", err)
	}
	p.done = done
	c.mntns = p
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "ready\n" {
		<-p.done
		t.Fatalf("k8stest: the mount namespace of containerd and the kubelet: %v\n%s", p.cmd.ProcessState, errb.String())
	}
}

func (c *Cluster) startEtcd(t testing.TB) {
	t.Helper()
	client := fmt.Sprintf("https://127.0.0.1:%d", c.ports.etcd)
	peer := fmt.Sprintf("https://127.0.0.1:%d", c.ports.etcdPeer)
	pki := c.path("pki/etcd")
	c.start(t, "etcd", nil, "--name=node", "--data-dir="+c.path("etcd"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer, "--initial-cluster=node="+peer,
		"--cert-file="+pki+"/server.crt", "--key-file="+pki+"/server.key", "--trusted-ca-file="+pki+"/ca.crt", "--client-cert-auth=true",
		"--peer-cert-file="+pki+"/peer.crt", "--peer-key-file="+pki+"/peer.key", "--peer-trusted-ca-file="+pki+"/ca.crt", "--peer-client-cert-auth=true",
		"--unsafe-no-fsync=true", "--log-level=warn")
}

func (c *Cluster) startAPIServer(t testing.TB) {
	t.Helper()
	pki := c.path("pki")
	c.start(t, "kube-apiserver", nil,
		"--advertise-address="+c.NodeIP, "--bind-address=127.0.0.1", fmt.Sprint("--secure-port=", c.ports.apiServer),
		fmt.Sprintf("--etcd-servers=https://127.0.0.1:%d", c.ports.etcd),
		"--etcd-cafile="+pki+"/etcd/ca.crt", "--etcd-certfile="+pki+"/apiserver-etcd-client.crt", "--etcd-keyfile="+pki+"/apiserver-etcd-client.key",
		"--client-ca-file="+pki+"/ca.crt", "--tls-cert-file="+pki+"/apiserver.crt", "--tls-private-key-file="+pki+"/apiserver.key",
		"--kubelet-client-certificate="+pki+"/apiserver-kubelet-client.crt", "--kubelet-client-key="+pki+"/apiserver-kubelet-client.key",
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+pki+"/sa.pub", "--service-account-signing-key-file="+pki+"/sa.key",
		"--service-cluster-ip-range="+ServiceSubnet,
		"--requestheader-client-ca-file="+pki+"/front-proxy-ca.crt", "--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file="+pki+"/front-proxy-client.crt", "--proxy-client-key-file="+pki+"/front-proxy-client.key",
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction", "--allow-privileged=true",
		"--profiling=false")
}

// startContainerd starts containerd in the cluster's mount namespace and
// waits for its socket.
func (c *Cluster) startContainerd(t testing.TB, env []string) {
	t.Helper()
	// containerd finds its shim on PATH: this one's, not Debian's.
	env = append([]string{"PATH=" + c.bin + string(os.PathListSeparator) + os.Getenv("PATH")}, env...)
	p := c.startInNamespace(t, "containerd", env, "--config", c.path("containerd/config.toml"))
	c.waitFor(t, "containerd's socket", time.Minute, func(ctx context.Context) bool {
		select {
		case <-p.done:
			return false
		default:
		}
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return false
		}
		defer unix.Close(fd)
		return unix.Connect(fd, &unix.SockaddrUnix{Name: c.ContainerdSocket}) == nil
	})
}

func (c *Cluster) startKubelet(t testing.TB) {
	t.Helper()
	c.startInNamespace(t, "kubelet", nil, "--config="+c.path("kubelet/config.yaml"),
		"--kubeconfig="+c.path("kubeconfig/kubelet.conf"), "--root-dir="+c.path("kubelet"),
		"--hostname-override="+c.NodeName, "--node-ip="+c.NodeIP, "--v=1")
}

// cgroupMounts are the mount points of the host's cgroup hierarchies (v1
// and v2: this host may have both).
func cgroupMounts() []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		before, after, ok := strings.Cut(l, " - ")
		f, g := strings.Fields(before), strings.Fields(after)
		if ok && len(f) > 4 && len(g) > 0 && (g[0] == "cgroup" || g[0] == "cgroup2") && f[3] == "/" {
			out = append(out, f[4])
		}
	}
	return out
}

// makeCgroupRoot makes the cluster's cgroup root in every hierarchy (the
// kubelet wants it to exist), its cpuset that of its parent.
func (c *Cluster) makeCgroupRoot(t testing.TB) {
	t.Helper()
	for _, m := range cgroupMounts() {
		d := filepath.Join(m, c.CgroupRoot)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatalf("k8stest: cgroup root: %v", err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(m, f)); err == nil && !strings.HasPrefix(filepath.Base(m), "unified") {
				if _, err := os.Stat(filepath.Join(d, f)); err == nil {
					if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
						t.Fatalf("k8stest: %s: %v", filepath.Join(d, f), err)
					}
				}
			}
		}
	}
}

// cgroupProcs are the processes in the cluster's cgroups.
func (c *Cluster) cgroupProcs() []int {
	var out []int
	for _, m := range cgroupMounts() {
		filepath.WalkDir(filepath.Join(m, c.CgroupRoot), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(path)
			for _, s := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(s); err == nil {
					out = append(out, pid)
				}
			}
			return nil
		})
	}
	return out
}

// removeCgroups removes the cluster's cgroups, deepest first.
func (c *Cluster) removeCgroups(t testing.TB) {
	for _, m := range cgroupMounts() {
		var dirs []string
		filepath.WalkDir(filepath.Join(m, c.CgroupRoot), func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := unix.Rmdir(d); err != nil {
				t.Errorf("k8stest: rmdir %s: %v", d, err)
			}
		}
	}
}

// namespaceProcs are the processes in the mount namespace of containerd
// and the kubelet (containerd's shims and the runtimes they run) and
// those whose command line names the cluster's directory.
func (c *Cluster) namespaceProcs() []int {
	var out []int
	ns, holder := "", 0
	if c.mntns != nil {
		holder = c.mntns.cmd.Process.Pid
		ns, _ = os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", holder))
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() || pid == holder {
			continue
		}
		mnt, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if (ns != "" && mnt == ns) || strings.Contains(string(cmdline), c.Dir+"/") {
			out = append(out, pid)
		}
	}
	return out
}

// killAll SIGKILLs what list finds until it finds nothing (for up to a
// minute).
func killAll(t testing.TB, what string, list func() []int) {
	deadline := time.Now().Add(time.Minute)
	for {
		pids := list()
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("k8stest: %s still has processes %v", what, pids)
			return
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// teardown deletes the pods (so that the CNI plugins undo their network),
// then stops every process of the cluster and removes what it made.
func (c *Cluster) teardown(t testing.TB) {
	running := func(name string) bool {
		for _, p := range c.procs {
			if p.name == name {
				select {
				case <-p.done:
					return false
				default:
					return true
				}
			}
		}
		return false
	}
	if running("kube-apiserver") && running("kubelet") {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		if r := c.Run(ctx, "", "delete", "pods", "--all", "--all-namespaces", "--grace-period=1", "--timeout=60s"); r.Err != nil {
			t.Logf("k8stest: deleting the pods: %s\nthe cluster's logs:\n%s", r, c.logs())
		}
		for ctx.Err() == nil {
			if r := c.Ctr(ctx, "tasks", "ls", "-q"); r.Err != nil || strings.TrimSpace(r.Stdout) == "" {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		cancel()
	}
	if t.Failed() {
		t.Logf("k8stest: the cluster's logs:\n%s", c.logs())
	}
	var containerd *proc
	for i := len(c.procs) - 1; i >= 0; i-- {
		if c.procs[i].name == "containerd" {
			containerd = c.procs[i]
			continue
		}
		c.procs[i].stop(t)
	}
	killAll(t, "the pods' cgroups", c.cgroupProcs)
	if containerd != nil {
		containerd.stop(t)
	}
	killAll(t, "the mount namespace of containerd", c.namespaceProcs)
	if c.mntns != nil {
		c.mntns.cmd.Process.Kill()
		<-c.mntns.done
	}
	c.removeLeftovers(t)
}

// removeLeftovers removes the pods' bridge, the cluster's cgroups, its
// entries in libcni's cache and its directory, once no process of the
// cluster is left.
func (c *Cluster) removeLeftovers(t testing.TB) {
	if _, err := os.Stat("/sys/class/net/" + c.Bridge); err == nil {
		if out, err := exec.Command("ip", "link", "del", c.Bridge).CombinedOutput(); err != nil {
			t.Errorf("k8stest: ip link del %s: %v: %s", c.Bridge, err, out)
		}
	}
	c.removeCgroups(t)
	// libcni's cache of what the plugins did (the cluster's network's
	// and containerd's loopback's), kept outside the namespace: left when
	// a pod's network was not undone. Its entries name the pod's network
	// namespace, under the cluster's directory.
	left, _ := filepath.Glob(filepath.Join(cniCache, "results", "*"))
	for _, f := range left {
		if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), `"netns":"`+c.Dir+"/") {
			os.Remove(f)
		}
	}
	if !c.cniCacheExisted {
		os.Remove(filepath.Join(cniCache, "results"))
		os.Remove(cniCache)
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		t.Errorf("k8stest: %v", err)
	}
}

// ownerFile, in a cluster's directory, names the test process that owns
// the cluster: its pid and its start time (field 22 of /proc/PID/stat).
const ownerFile = "owner"

// processStart is the start time of process pid, "" when there is none.
func processStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The command's name, in parentheses, may hold spaces.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// writeOwner records this test process as the cluster's owner.
func (c *Cluster) writeOwner(t testing.TB) {
	t.Helper()
	owner := fmt.Sprintf("%d %s\n", os.Getpid(), processStart(os.Getpid()))
	if err := os.WriteFile(c.path(ownerFile), []byte(owner), 0o600); err != nil {
		t.Fatal(err)
	}
}

// sweepStale tears down what is left of the clusters whose test process
// died without its teardown (killed by go test's timeout, say): the runc
// shims and the pods' processes outlive it, and the bridge, the cgroups
// and the directory are left. The control plane, containerd, the kubelet
// and the mount namespace's holder died with it (SIGKILL as its parent
// died).
func sweepStale(t testing.TB) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "hutch-k8s-*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // starting, or not a cluster's
		}
		var pid int
		var start string
		if _, err := fmt.Sscanf(string(b), "%d %s", &pid, &start); err != nil || (processStart(pid) == start && start != "") {
			continue
		}
		t.Logf("k8stest: removing the cluster its test process (pid %d) left in %s", pid, dir)
		c := newCluster(dir, "")
		c.cniCacheExisted = true
		killAll(t, "the pods' cgroups", c.cgroupProcs)
		killAll(t, "the left cluster", c.namespaceProcs)
		c.removeLeftovers(t)
	}
}
