// Package k8stest starts a single-node Kubernetes cluster private to the
// test that asks for it: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, containerd 2 with its CRI plugin and a kubelet, with
// runc 1.5 as the pods' runtime, built by scripts/k8s-binaries.sh into the
// directory $HUTCH_TEST_K8S_BIN names.
//
// Everything the cluster keeps is in a temporary directory of its own;
// every listener is on 127.0.0.1 except the kubelet's, on an address of
// this machine (the API server reaches it there for exec and logs; the
// kubelet refuses a loopback node address). containerd and the kubelet
// run in a mount namespace of their own, so that what they mount (images'
// snapshots, volumes, pods' network namespaces) and the runtime state they
// keep in /run/containerd and /var/log never reach the host's, and the
// kernel settings the kubelet insists on are shown to it there without
// being changed on the host. Pods' cgroups are under a cgroup root of the
// cluster's own, and their network a bridge and an address range of its
// own with no route off the bridge; NodeOnBridge gives the bridge an
// address of the node's there, and APIServerOnBridge a relay to the API
// server at that address, which its certificate names, for clients of
// the API in pods (in-cluster configuration). Images come from `docker
// save` tarballs imported into containerd, not from a registry; the
// pods' sandbox ("pause") image is built here (./pause).
//
// StartAPIServer starts etcd and kube-apiserver alone, made the same way,
// for a test of what a client keeps in the API (no pod ever runs).
//
// The test's end deletes the pods, stops every process by pid (the
// kubelet, the control plane, containerd, its shims and whatever is left
// in the pods' cgroups), removes the bridge, the cgroups and the
// directory. A test skips with the reason when it is not root or the
// binaries are not built, and fails instead under HUTCH_TEST_ROOT=1.
package k8stest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil"
	"github.com/hutch-sandbox/hutch/internal/testutil/ocitest"
)

// BinEnv names the environment variable that gives the directory of the
// cluster's binaries (scripts/k8s-binaries.sh prints it; scripts/test.sh
// sets it).
const BinEnv = "HUTCH_TEST_K8S_BIN"

// Binaries are the programs BinEnv's directory must hold.
var Binaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl", "kubeadm", "containerd", "containerd-shim-runc-v2", "ctr", "runc"}

// Runc is the runc in the binaries' directory bin (runc 1.5, not Debian
// 12's 1.1): the runtime of the default runtime handler, first on the
// PATH of containerd and its shims, and the one a runtime handler's
// runtime that wraps runc should hand containers to.
func Runc(bin string) string { return filepath.Join(bin, "runc") }

// CNIBinDir holds the CNI plugins (Debian's containernetworking-plugins).
const CNIBinDir = "/usr/lib/cni"

// cniCache is where libcni, in containerd, keeps what the plugins did.
const cniCache = "/var/lib/cni"

// PauseImage is the name of the sandbox image containerd is given.
const PauseImage = "hutch.local/k8stest/pause:1"

// RuntimeHandler is a runtime handler of containerd's CRI plugin besides
// the default "runc": a RuntimeClass whose handler is Name runs its pods'
// containers with the runc shim and BinaryName as their runtime, or, with
// RunscShim, with gVisor's shim and BinaryName as its runsc.
type RuntimeHandler struct {
	Name       string
	BinaryName string
	// PodAnnotations are the pod annotations (globs, such as
	// "dev.hutch.*") containerd passes on to the runtime.
	PodAnnotations []string
	// RunscShim, when set, is gVisor's containerd shim
	// (containerd-shim-runsc-v1): the handler's runtime type is
	// io.containerd.runsc.v1, and the shim's
	// configuration names BinaryName as runsc and RunscRoot as its
	// root. The shim's start
	// is ./shimstart's: gVisor's lowers the shim's oom_score_adj, which
	// takes a capability root lacks on the test machines.
	RunscShim string
}

// Options are what a test changes in its cluster.
type Options struct {
	// RuntimeHandlers are added to containerd's CRI plugin.
	RuntimeHandlers []RuntimeHandler
	// Images are `docker save` tarballs imported into containerd's
	// namespace of the CRI before the node is ready.
	Images []string
	// ContainerdEnv is added to the environment of containerd, which its
	// shims and runtimes inherit.
	ContainerdEnv []string
}

// Cluster is a running cluster of the test's own.
type Cluster struct {
	// Dir holds everything the cluster keeps.
	Dir string
	// Kubeconfig is the path of a kubeconfig of a cluster administrator
	// (group system:masters).
	Kubeconfig string
	// NodeName and NodeIP are the node's name and address.
	NodeName, NodeIP string
	// ContainerdSocket is containerd's gRPC socket (ctr --address).
	ContainerdSocket string
	// Network is the name of the pods' CNI network, Bridge its bridge
	// and Subnet its addresses.
	Network, Bridge, Subnet string
	// CgroupRoot is the cgroup under which the kubelet puts the pods.
	CgroupRoot string
	// Runc is the runc of the pods (Runc of the binaries' directory).
	Runc string

	bin string
	// cniCacheExisted is whether cniCache did before the cluster
	// started: if not, the teardown removes it when it is empty.
	cniCacheExisted bool
	ports           ports
	procs           []*proc
	mntns           *proc

	// onBridge is whether NodeOnBridge gave the bridge its address.
	bridgeMu sync.Mutex
	onBridge bool
}

// BinDir returns the directory of the cluster's binaries, or skips (fails
// under HUTCH_TEST_ROOT=1) saying how to build them.
func BinDir(t testing.TB) string {
	t.Helper()
	testutil.RequireRoot(t)
	dir := os.Getenv(BinEnv)
	testutil.Need(t, dir != "", BinEnv+" is not set (scripts/k8s-binaries.sh builds the binaries and prints their directory)")
	for _, b := range Binaries {
		_, err := os.Stat(filepath.Join(dir, b))
		testutil.Need(t, err == nil, fmt.Sprintf("%s=%s lacks %s: %v (scripts/k8s-binaries.sh builds it)", BinEnv, dir, b, err))
	}
	return dir
}

// StartCluster starts a cluster and waits for its node to be Ready and the
// default service account to exist; the test's end tears it down.
func StartCluster(t testing.TB, opts Options) *Cluster {
	t.Helper()
	bin := BinDir(t)
	ocitest.Need(t, "util-linux:unshare", "util-linux:nsenter", "iproute2:ip")
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		_, err := os.Stat(filepath.Join(CNIBinDir, p))
		testutil.Need(t, err == nil, fmt.Sprintf("needs the CNI plugin %s (Debian package containernetworking-plugins): %v", p, err))
	}
	begin := time.Now()
	c := newControlPlane(t, bin, opts)
	c.makeCgroupRoot(t)
	c.startMountNamespace(t)

	c.startEtcd(t)
	c.startContainerd(t, opts.ContainerdEnv)
	c.startAPIServer(t)
	// The images are imported while the API server starts.
	c.importPause(t)
	for _, img := range opts.Images {
		c.Import(t, img)
	}
	c.waitAPI(t)
	c.start(t, "kube-controller-manager", nil,
		"--kubeconfig="+c.path("kubeconfig/controller-manager.conf"),
		"--authentication-kubeconfig="+c.path("kubeconfig/controller-manager.conf"),
		"--authorization-kubeconfig="+c.path("kubeconfig/controller-manager.conf"),
		"--bind-address=127.0.0.1", fmt.Sprint("--secure-port=", c.ports.controllerManager),
		"--cluster-name="+c.Network,
		"--cluster-signing-cert-file="+c.path("pki/ca.crt"), "--cluster-signing-key-file="+c.path("pki/ca.key"),
		"--root-ca-file="+c.path("pki/ca.crt"), "--service-account-private-key-file="+c.path("pki/sa.key"),
		"--use-service-account-credentials=true", "--leader-elect=false", "--allocate-node-cidrs=false")
	c.start(t, "kube-scheduler", nil,
		"--kubeconfig="+c.path("kubeconfig/scheduler.conf"),
		"--authentication-kubeconfig="+c.path("kubeconfig/scheduler.conf"),
		"--authorization-kubeconfig="+c.path("kubeconfig/scheduler.conf"),
		"--bind-address=127.0.0.1", fmt.Sprint("--secure-port=", c.ports.scheduler), "--leader-elect=false")
	// What kubeadm init binds in a phase not run here: its administrators
	// (group kubeadm:cluster-admins) to cluster-admin, and the API
	// server's client of kubelets (for exec and logs) to
	// system:kubelet-api-admin.
	c.Kubectl(t, "create", "clusterrolebinding", "kubeadm:cluster-admins", "--clusterrole=cluster-admin", "--group=kubeadm:cluster-admins")
	c.Kubectl(t, "create", "clusterrolebinding", "kubeadm:kubelet-api-admin", "--clusterrole=system:kubelet-api-admin", "--user=kube-apiserver-kubelet-client")

	c.startKubelet(t)
	c.waitNodeReady(t)
	c.waitFor(t, "the default service account", 3*time.Minute, func(ctx context.Context) bool {
		return c.Run(ctx, "", "get", "serviceaccount", "default", "-n", "default").Err == nil
	})
	t.Logf("k8stest: cluster %s (node %s at %s) ready in %v", c.Network, c.NodeName, c.NodeIP, time.Since(begin).Round(time.Millisecond))
	return c
}

// newControlPlane makes a cluster's directory, configurations,
// certificates and kubeconfigs, starts nothing, and has the test's end
// tear down what is started of it.
func newControlPlane(t testing.TB, bin string, opts Options) *Cluster {
	t.Helper()
	nodeIP, err := nodeAddress()
	testutil.Need(t, err == nil, fmt.Sprintf("needs an IPv4 address of this machine for the node: %v", err))

	sweepStale(t)
	dir, err := os.MkdirTemp("", "hutch-k8s-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c := newCluster(dir, bin)
	c.NodeIP = nodeIP
	_, err = os.Stat(cniCache)
	c.cniCacheExisted = err == nil
	t.Cleanup(func() { c.teardown(t) })
	c.writeOwner(t)
	c.ports = freePorts(t, nodeIP)

	c.writeConfigs(t, opts)
	c.kubeadm(t, "init", "phase", "certs", "all", "--config", c.path("kubeadm.yaml"))
	c.kubeadm(t, "init", "phase", "kubeconfig", "all", "--config", c.path("kubeadm.yaml"), "--kubeconfig-dir", c.path("kubeconfig"))
	c.serverOnLoopback(t)
	return c
}

// APIServer is an API server of the test's own, with no node, controller
// or scheduler: a store of objects for a client of the API.
type APIServer struct {
	// Kubeconfig is the path of a kubeconfig of an administrator (group
	// system:masters).
	Kubeconfig string
	c          *Cluster
}

// StartAPIServer starts etcd and kube-apiserver only, on 127.0.0.1, with
// certificates and a kubeconfig made as StartCluster's are, and waits for
// the API server to be ready and its namespace default to exist; the
// test's end stops them and removes their directory. It skips, or fails,
// as StartCluster does.
func StartAPIServer(t testing.TB) *APIServer {
	t.Helper()
	c := newControlPlane(t, BinDir(t), Options{})
	// No pod runs: libcni's cache is none of its business.
	c.cniCacheExisted = true
	c.startEtcd(t)
	c.startAPIServer(t)
	c.waitAPI(t)
	c.waitFor(t, "the namespace default", 3*time.Minute, func(ctx context.Context) bool {
		return c.Run(ctx, "", "get", "namespace", "default").Err == nil
	})
	return &APIServer{Kubeconfig: c.Kubeconfig, c: c}
}

// Kubectl runs kubectl on the API server as its administrator and returns
// its standard output, failing the test when it fails.
func (a *APIServer) Kubectl(t testing.TB, args ...string) string {
	t.Helper()
	return a.c.Kubectl(t, args...)
}

// newCluster is the cluster of directory dir (hutch-k8s-ID): its names
// come from its ID.
func newCluster(dir, bin string) *Cluster {
	id := strings.ToLower(strings.TrimPrefix(filepath.Base(dir), "hutch-k8s-"))
	return &Cluster{
		Dir:              dir,
		Kubeconfig:       filepath.Join(dir, "kubeconfig", "super-admin.conf"),
		NodeName:         "hutch-node-" + id,
		ContainerdSocket: filepath.Join(dir, "containerd", "containerd.sock"),
		Network:          "hutch-k8s-" + id,
		Bridge:           bridgeName(id),
		Subnet:           podSubnet(id),
		CgroupRoot:       "/hutch-k8s-" + id,
		Runc:             Runc(bin),
		bin:              bin,
	}
}

// path is the path of name under the cluster's directory.
func (c *Cluster) path(name string) string { return filepath.Join(c.Dir, name) }

// Run runs kubectl on the cluster as its administrator, stdin its input.
func (c *Cluster) Run(ctx context.Context, stdin string, args ...string) ocitest.Result {
	return run(ctx, stdin, filepath.Join(c.bin, "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
}

// Command is kubectl with args on the cluster as its administrator, not
// started: for a kubectl that runs until it is stopped (port-forward).
func (c *Cluster) Command(args ...string) *exec.Cmd {
	return exec.Command(filepath.Join(c.bin, "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
}

// Kubectl runs kubectl with args and returns its standard output, failing
// the test when it fails.
func (c *Cluster) Kubectl(t testing.TB, args ...string) string {
	t.Helper()
	return c.KubectlIn(t, "", args...)
}

// KubectlIn is Kubectl with stdin as kubectl's input (`apply -f -`).
func (c *Cluster) KubectlIn(t testing.TB, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r := c.Run(ctx, stdin, args...)
	if r.Err != nil {
		t.Fatalf("kubectl %s: %s", strings.Join(args, " "), r)
	}
	return r.Stdout
}

// Ctr runs containerd's ctr on the cluster's containerd, in the CRI's
// namespace k8s.io.
func (c *Cluster) Ctr(ctx context.Context, args ...string) ocitest.Result {
	return run(ctx, "", filepath.Join(c.bin, "ctr"), append([]string{"--address", c.ContainerdSocket, "--namespace", "k8s.io"}, args...)...)
}

// ContainerPid returns the host pid of the first process of the container
// named container in pod (of namespace default), as containerd's task
// reports it.
func (c *Cluster) ContainerPid(t testing.TB, pod, container string) int {
	t.Helper()
	id := c.Kubectl(t, "get", "pod", pod, "-o", fmt.Sprintf(`jsonpath={.status.containerStatuses[?(@.name==%q)].containerID}`, container))
	id, ok := strings.CutPrefix(id, "containerd://")
	if !ok || id == "" {
		t.Fatalf("pod %s: container %s has no containerd ID: %q", pod, container, id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := c.Ctr(ctx, "tasks", "ls")
	if r.Err != nil {
		t.Fatalf("ctr tasks ls: %s", r)
	}
	for _, line := range strings.Split(r.Stdout, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == id {
			pid, err := strconv.Atoi(f[1])
			if err != nil || pid <= 0 {
				t.Fatalf("ctr tasks ls: task %s has pid %q", id, f[1])
			}
			return pid
		}
	}
	t.Fatalf("ctr tasks ls: no task %s (pod %s, container %s):\n%s", id, pod, container, r.Stdout)
	return 0
}

// EmptyDir returns the host directory of the emptyDir volume named volume
// of pod (of namespace default): the kubelet's, under the cluster's
// directory.
func (c *Cluster) EmptyDir(t testing.TB, pod, volume string) string {
	t.Helper()
	uid := c.Kubectl(t, "get", "pod", pod, "-o", "jsonpath={.metadata.uid}")
	if uid == "" || strings.ContainsAny(uid, "/.") {
		t.Fatalf("pod %s: uid %q", pod, uid)
	}
	return c.path(filepath.Join("kubelet", "pods", uid, "volumes", "kubernetes.io~empty-dir", volume))
}

// Import imports a `docker save` tarball into the CRI's images, where a pod
// with imagePullPolicy Never finds it by its tag.
func (c *Cluster) Import(t testing.TB, tar string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if r := c.Ctr(ctx, "images", "import", "--platform", "linux/amd64", tar); r.Err != nil {
		t.Fatalf("ctr images import %s: %s", tar, r)
	}
}

// kubeadm runs kubeadm (which makes the certificates and kubeconfigs,
// offline).
func (c *Cluster) kubeadm(t testing.TB, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if r := run(ctx, "", filepath.Join(c.bin, "kubeadm"), args...); r.Err != nil {
		t.Fatalf("kubeadm %s: %s", strings.Join(args, " "), r)
	}
}

// serverOnLoopback points the kubeconfigs kubeadm wrote for the
// controller manager and the scheduler, which name the API server's
// advertised address, at 127.0.0.1, where it listens.
func (c *Cluster) serverOnLoopback(t testing.TB) {
	t.Helper()
	from := fmt.Sprintf("https://%s:%d", c.NodeIP, c.ports.apiServer)
	to := fmt.Sprintf("https://127.0.0.1:%d", c.ports.apiServer)
	confs, _ := filepath.Glob(c.path("kubeconfig/*.conf"))
	for _, f := range confs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(strings.ReplaceAll(string(b), from, to)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// waitFor polls cond (each call given up to 30 s) for up to d, failing the
// test with the logs of the cluster when it does not come true.
func (c *Cluster) waitFor(t testing.TB, what string, d time.Duration, cond func(ctx context.Context) bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		ok := cond(ctx)
		cancel()
		if ok {
			return
		}
		for _, p := range c.procs {
			select {
			case <-p.done:
				t.Fatalf("k8stest: %s ended (%v) while waiting for %s:\n%s", p.name, p.cmd.ProcessState, what, p.tail())
			default:
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("k8stest: no %s within %v:\n%s", what, d, c.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitAPI waits for the API server to be ready.
func (c *Cluster) waitAPI(t testing.TB) {
	t.Helper()
	c.waitFor(t, "ready API server", 3*time.Minute, func(ctx context.Context) bool {
		r := c.Run(ctx, "", "get", "--raw=/readyz")
		return r.Err == nil && strings.TrimSpace(r.Stdout) == "ok"
	})
}

// waitNodeReady waits for the node to be registered and Ready.
func (c *Cluster) waitNodeReady(t testing.TB) {
	t.Helper()
	c.waitFor(t, "Ready node "+c.NodeName, 3*time.Minute, func(ctx context.Context) bool {
		r := c.Run(ctx, "", "get", "node", c.NodeName, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		return r.Err == nil && r.Stdout == "True"
	})
}

// importPause builds the sandbox image and imports it.
func (c *Cluster) importPause(t testing.TB) {
	t.Helper()
	c.Import(t, pauseImage(t, c.Dir))
}

// logs are the ends of every component's log, for a failure's message.
func (c *Cluster) logs() string {
	var b strings.Builder
	for _, p := range c.procs {
		fmt.Fprintf(&b, "--- %s:\n%s\n", p.name, p.tail())
	}
	return b.String()
}

// run runs name with args, stdin its input, and returns what it did.
func run(ctx context.Context, stdin, name string, args ...string) ocitest.Result {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb testutil.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	r := ocitest.Result{Stdout: out.String(), Stderr: errb.String(), Err: err}
	if cmd.ProcessState != nil {
		r.Code = cmd.ProcessState.ExitCode()
	}
	return r
}
