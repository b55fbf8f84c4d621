package k8stest

import (
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
)

// KubernetesVersion is the version scripts/k8s-binaries.sh builds
// (test/k8s/build/go.mod), which kubeadm is told.
const KubernetesVersion = "v1.37.2"

// ServiceSubnet is the cluster's range of service addresses (no
// kube-proxy runs: nothing routes them).
const ServiceSubnet = "10.96.0.0/16"

// ports are the cluster's listeners: every one on 127.0.0.1 but the
// kubelet's, on the node's address.
type ports struct {
	etcd, etcdPeer, apiServer, controllerManager, scheduler, kubelet int
}

// freePorts picks ports free now on 127.0.0.1 and, for the kubelet, on
// nodeIP.
func freePorts(t testing.TB, nodeIP string) ports {
	t.Helper()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	pick := func(host string) int {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		return l.Addr().(*net.TCPAddr).Port
	}
	return ports{etcd: pick("127.0.0.1"), etcdPeer: pick("127.0.0.1"), apiServer: pick("127.0.0.1"),
		controllerManager: pick("127.0.0.1"), scheduler: pick("127.0.0.1"), kubelet: pick(nodeIP)}
}

// nodeAddress is the first global IPv4 address of an interface that is up
// and not a loopback one.
func nodeAddress() (string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, i := range ifs {
		if i.Flags&net.FlagUp == 0 || i.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := i.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
				return n.IP.String(), nil
			}
		}
	}
	return "", errors.New("no interface that is up has a global IPv4 address")
}

// hash16 is a small digest of the cluster's id.
func hash16(id string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(id))
	return h.Sum32()
}

// bridgeName is the name of the pods' bridge (at most 15 bytes).
func bridgeName(id string) string { return fmt.Sprintf("hk8s%08x", hash16(id)) }

// podSubnet is a /24 in 10.200.0.0/13 picked by the cluster's id.
func podSubnet(id string) string {
	h := hash16(id)
	return fmt.Sprintf("10.%d.%d.0/24", 200+h%8, (h>>3)%256)
}

// writeConfigs writes kubeadm's, containerd's, the CNI's and the kubelet's
// configurations, and the kernel settings the kubelet is shown.
func (c *Cluster) writeConfigs(t testing.TB, opts Options) {
	t.Helper()
	for _, d := range []string{"pki", "kubeconfig", "etcd", "containerd", "cni/net.d", "cni/ipam", "kubelet", "pod-logs", "logs", "sysctl"} {
		if err := os.MkdirAll(c.path(d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"kubeadm.yaml":                    c.kubeadmConfig(),
		"containerd/config.toml":          c.containerdConfig(opts.RuntimeHandlers),
		"cni/net.d/10-hutch-k8s.conflist": c.cniConfig(),
		"kubelet/config.yaml":             c.kubeletConfig(),
	}
	for _, h := range opts.RuntimeHandlers {
		if h.RunscShim != "" {
			files[c.runscConfigName(h.Name)] = c.runscConfig(h)
			c.installShimStart(t, h)
		}
	}
	for name, v := range kubeletSysctls {
		files[filepath.Join("sysctl", strings.ReplaceAll(name, "/", "."))] = v + "\n"
	}
	for name, body := range files {
		if err := os.WriteFile(c.path(name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// kubeadmConfig is kubeadm's configuration. The API server's certificate
// names the node's address on the pods' bridge too, where
// APIServerOnBridge's relay is.
func (c *Cluster) kubeadmConfig() string {
	onBridge, _ := bridgeAddress(c.Subnet)
	return fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: %[1]s
  bindPort: %[2]d
nodeRegistration:
  name: %[3]s
  criSocket: unix://%[4]s
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: %[5]s
clusterName: %[6]s
controlPlaneEndpoint: 127.0.0.1:%[2]d
certificatesDir: %[7]s
encryptionAlgorithm: ECDSA-P256
networking:
  serviceSubnet: %[8]s
  dnsDomain: cluster.local
apiServer:
  certSANs: ["127.0.0.1", "localhost", "%[10]s"]
etcd:
  local:
    dataDir: %[9]s
`, c.NodeIP, c.ports.apiServer, c.NodeName, c.ContainerdSocket, KubernetesVersion, c.Network, c.path("pki"), ServiceSubnet, c.path("etcd"), onBridge)
}

func (c *Cluster) containerdConfig(handlers []RuntimeHandler) string {
	var b strings.Builder
	fmt.Fprintf(&b, `version = 3
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[debug]
  level = "info"
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %[6]q
[plugins."io.containerd.cri.v1.runtime"]
  enable_selinux = false
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%[7]q]
    conf_dir = %[8]q
    max_conf_num = 1
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
`, c.path("containerd/root"), c.path("containerd/state"), c.ContainerdSocket, c.ContainerdSocket+".ttrpc",
		c.path("containerd/opt"), PauseImage, CNIBinDir, c.path("cni/net.d"))
	all := append([]RuntimeHandler{{Name: "runc", BinaryName: c.Runc}}, handlers...)
	for _, h := range all {
		annotations := make([]string, len(h.PodAnnotations))
		for i, a := range h.PodAnnotations {
			annotations[i] = fmt.Sprintf("%q", a)
		}
		if h.RunscShim != "" {
			fmt.Fprintf(&b, `    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.%[1]q]
      runtime_type = "io.containerd.runsc.v1"
      runtime_path = %[3]q
      pod_annotations = [%[2]s]
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.%[1]q.options]
        TypeUrl = "io.containerd.runsc.v1.options"
        ConfigPath = %[4]q
`, h.Name, strings.Join(annotations, ", "), c.shimStartPath(h.Name), c.path(c.runscConfigName(h.Name)))
			continue
		}
		fmt.Fprintf(&b, `    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.%[1]q]
      runtime_type = "io.containerd.runc.v2"
      pod_annotations = [%[2]s]
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.%[1]q.options]
        BinaryName = %[3]q
        SystemdCgroup = false
`, h.Name, strings.Join(annotations, ", "), h.BinaryName)
	}
	return b.String()
}

// runscConfigName is the file, in the cluster's directory, of the
// configuration of gVisor's shim for the runtime handler name.
func (c *Cluster) runscConfigName(name string) string {
	return filepath.Join("containerd", "runsc-"+name+".toml")
}

// shimStartPath is the containerd shim of the runtime handler name that
// has a RunscShim: ./shimstart, which does the shim's start and hands the
// rest to RunscShim.
func (c *Cluster) shimStartPath(name string) string {
	return c.path(filepath.Join("shim", name, "containerd-shim-runsc-v1"))
}

// installShimStart puts ./shimstart at shimStartPath, with the link to
// h.RunscShim it hands the shim's calls to beside it.
func (c *Cluster) installShimStart(t testing.TB, h RuntimeHandler) {
	t.Helper()
	p := c.shimStartPath(h.Name)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, buildCommand(t, "shimstart"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(h.RunscShim, p+".real"); err != nil {
		t.Fatal(err)
	}
}

// RunscRoot is the root (--root) of the runsc of the runtime handler name
// that has a RunscShim, under which it keeps its containers' state, in
// containerd's namespace of the CRI.
func (c *Cluster) RunscRoot(name string) string {
	return c.path(filepath.Join("runsc", name, "k8s.io"))
}

// ShimLogDir is the directory of the logs of gVisor's shim of the runtime
// handler name, one per container it serves.
func (c *Cluster) ShimLogDir(name string) string {
	return c.path(filepath.Join("logs", "shim-"+name))
}

// runscConfig is the configuration of gVisor's shim for h: its runsc,
// the runsc's root, its logs in the cluster's logs.
func (c *Cluster) runscConfig(h RuntimeHandler) string {
	return fmt.Sprintf("binary_name = %q\nroot = %q\nlog_path = %q\nlog_level = \"debug\"\n",
		h.BinaryName, filepath.Dir(c.RunscRoot(h.Name)), c.ShimLogDir(h.Name)+"/")
}

// cniConfig is the pods' network: a bridge of the cluster's own without an
// address (not a gateway: the bridge plugin would turn on the host's IP
// forwarding), addresses from the cluster's /24 but the node's last one
// (NodeOnBridge), no route off the bridge.
func (c *Cluster) cniConfig() string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %[1]q,
  "plugins": [
    {
      "type": "bridge",
      "bridge": %[2]q,
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %[3]q, "rangeEnd": %[5]q}]],
        "dataDir": %[4]q
      }
    }
  ]
}
`, c.Network, c.Bridge, c.Subnet, c.path("cni/ipam"), lastPodAddress(c.Subnet))
}

// kubeletSysctls are the kernel settings the kubelet wants
// (pkg/kubelet/cm setupKernelTunables); it is shown these values, bound
// over /proc/sys in its mount namespace, and with protectKernelDefaults
// it never writes them.
var kubeletSysctls = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

func (c *Cluster) kubeletConfig() string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: %[2]d
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %[3]s
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://%[4]s
cgroupDriver: cgroupfs
cgroupRoot: %[5]s
failCgroupV1: false
failSwapOn: false
protectKernelDefaults: true
localStorageCapacityIsolation: false
podLogsDir: %[6]s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
  imagefs.inodesFree: "1%%"
clusterDomain: cluster.local
`, c.NodeIP, c.ports.kubelet, c.path("pki/ca.crt"), c.ContainerdSocket, c.CgroupRoot, c.path("pod-logs"))
}

// commands are the programs of this package's own (./pause, ./shimstart)
// built once per test process, by name.
var commands sync.Map

// command is one of commands.
type command struct {
	once sync.Once
	bin  []byte
	err  error
}

// buildCommand builds the program ./name of this package, static, once
// per test process, and returns its binary.
func buildCommand(t testing.TB, name string) []byte {
	t.Helper()
	v, _ := commands.LoadOrStore(name, &command{})
	cmd := v.(*command)
	cmd.once.Do(func() {
		tmp, err := os.MkdirTemp("", "hutch-k8stest-")
		if err != nil {
			cmd.err = err
			return
		}
		defer os.RemoveAll(tmp)
		b := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(tmp, name), "github.com/hutch-sandbox/hutch/internal/testutil/k8stest/"+name)
		b.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := b.CombinedOutput(); err != nil {
			cmd.err = fmt.Errorf("go build %s: %v\n%s", name, err, out)
			return
		}
		cmd.bin, cmd.err = os.ReadFile(filepath.Join(tmp, name))
	})
	if cmd.err != nil {
		t.Fatal(cmd.err)
	}
	return cmd.bin
}

// pauseImage builds the pause command (once per test process) and writes
// an image of it, PauseImage, as a `docker save` tarball into dir.
func pauseImage(t testing.TB, dir string) string {
	t.Helper()
	pauseBin := buildCommand(t, "pause")
	img := imagetest.Image(t, "amd64", func(cf *v1.Config) { cf.Entrypoint = []string{"/pause"} },
		imagetest.Layer(t, imagetest.Tar(t, imagetest.File("pause", string(pauseBin), 0o755))))
	return imagetest.DockerSave(t, img, PauseImage, dir)
}
