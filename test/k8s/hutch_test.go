//go:build linux

package k8s

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil"
	"github.com/hutch-sandbox/hutch/internal/testutil/k8stest"
	"github.com/hutch-sandbox/hutch/internal/testutil/ocitest"
)

// runtimeClassYAMLHutch is the RuntimeClasses hutch and hutch-gvisor, of
// hutchCluster's handlers, and the start of a document after them.
const runtimeClassYAMLHutch = `apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: hutch
handler: hutch
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: ` + gvisorHandler + `
handler: ` + gvisorHandler + `
---
`

// hutchPodYAML is a pod of the RuntimeClass hutch whose egress policy
// the node's policy "pod" decides (the annotation): two containers, the
// second as uid 1000, sharing an emptyDir volume.
const hutchPodYAML = runtimeClassYAMLHutch + `apiVersion: v1
kind: Pod
metadata:
  name: confined
  annotations:
    dev.hutch.policy: scoped
spec:
  runtimeClassName: hutch
  terminationGracePeriodSeconds: 5
  volumes:
  - name: shared
    emptyDir: {}
  containers:
  - name: agent
    image: ` + ocitest.TestImage + `
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]
    volumeMounts:
    - {name: shared, mountPath: /shared}
  - name: sidecar
    image: ` + ocitest.TestImage + `
    imagePullPolicy: Never
    securityContext: {runAsUser: 1000, runAsGroup: 1000}
    command: ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]
    volumeMounts:
    - {name: shared, mountPath: /shared}
`

// TestHutchCluster runs the tests of pods on one cluster (a cluster's
// start and teardown take half a minute of both cores): a pod of the
// default handler (runcPod), hutch-runc's installer (testRuntimeInstaller),
// a runtime handler's pod annotations (runtimeHandler), pods of the
// RuntimeClass hutch (runtimeClassHutch) and hutch's agent as a pod
// (agentPod); then that the cluster's teardown, with pods still running,
// left nothing behind.
func TestHutchCluster(t *testing.T) {
	var c *k8stest.Cluster
	t.Run("cluster", func(t *testing.T) {
		recorder, specs := recorderHandler(t)
		begin := time.Now()
		var port int
		c, port = hutchCluster(t, []string{busyboxTar(t)}, recorder)
		t.Logf("cluster started in %v", time.Since(begin).Round(time.Millisecond))
		t.Run("runc pod", func(t *testing.T) { runcPod(t, c) })
		t.Run("installer", func(t *testing.T) { testRuntimeInstaller(t, c) })
		t.Run("runtime handler", func(t *testing.T) { runtimeHandler(t, c, specs) })
		t.Run("runtime class", func(t *testing.T) { runtimeClassHutch(t, c, port) })
		t.Run("agent pod", func(t *testing.T) { agentPod(t, c, port) })
	})
	if c != nil {
		clusterLeftNothing(t, c)
	}
}

// runtimeClassHutch (TestHutchCluster/runtime_class): a pod of the RuntimeClass hutch (containerd 2's
// CRI, the runc shim with hutch-runc as its runtime, the pod's dev.hutch.*
// annotations passed on, runc 1.5 below it) runs confined as under
// Docker: Landlock and hutch's seccomp (no new user namespace, no
// netlink), no_new_privs, and the node policy the pod names for its
// egress — the allowed upstream through the proxy, nothing around it.
// Each of its two containers has a user namespace of hutch-runc's
// (runc 1.2 and later join the pod's network namespace before it): its
// root is an unprivileged host uid, and what it writes to the pod's
// emptyDir lands on disk with the ids it has inside; CRI's files (hosts,
// resolv.conf, the termination log, the service account's token) and the
// pod's sysctls (ip_unprivileged_port_start) work from it. Both share the
// pod's network namespace and its proxy; kubectl exec works in both, and
// on a terminal (-it).
func runtimeClassHutch(t *testing.T, c *k8stest.Cluster, port int) {
	c.KubectlIn(t, hutchPodYAML, "apply", "-f", "-")
	c.Kubectl(t, "wait", "--for=condition=Ready", "pod/confined", "--timeout=3m")

	for _, ct := range []struct {
		name string
		uid  int
	}{{"agent", 0}, {"sidecar", 1000}} {
		t.Run(ct.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			r := c.Run(ctx, "", "exec", "confined", "-c", ct.name, "--", "sh", "-c",
				fmt.Sprintf("grep -E '^(NoNewPrivs|Seccomp_filters):' /proc/self/status; echo uid_map $(cat /proc/self/uid_map); echo id $(id -u); "+
					"echo %[1]s >/shared/from-%[1]s && echo wrote; "+
					"grep -qw confined /etc/hosts && echo hosts ok; test -r /etc/resolv.conf && echo resolv.conf ok; "+
					"echo %[1]s >/dev/termination-log && echo termination-log ok; echo serviceaccount $(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace); "+
					"echo port_start $(cat /proc/sys/net/ipv4/ip_unprivileged_port_start); "+
					"fetch http://upstream.test:%[2]d/; attacker unshare:user socket:netlink tcp:127.0.0.2:%[2]d", ct.name, port))
			out := r.Stdout
			if r.Err != nil {
				t.Errorf("kubectl exec: %s", r)
			}
			for _, want := range []string{"NoNewPrivs:\t1", "id " + strconv.Itoa(ct.uid) + "\n", "wrote\n", "hosts ok", "resolv.conf ok", "termination-log ok", "serviceaccount default", "port_start 0\n", "hello from the pod's upstream", "unshare:user EPERM", "socket:netlink ENOTSUP"} {
				if !strings.Contains(out, want) {
					t.Errorf("no %q in:\n%s", want, out)
				}
			}
			for _, line := range strings.Split(out, "\n") {
				if f := strings.Fields(line); len(f) >= 2 && strings.HasPrefix(f[0], "tcp:127.0.0.2:") && f[1] == "ok" {
					t.Errorf("a connection around the proxy: %q", line)
				}
				// Inside, ids 0–65535 are a block of the host's
				// above 0: not the identity map.
				if f := strings.Fields(line); len(f) >= 1 && f[0] == "uid_map" {
					if len(f) != 4 || f[1] != "0" || f[2] == "0" || f[3] != "65536" {
						t.Errorf("uid_map inside: %q, want 0 HOSTID 65536 (HOSTID not 0)", line)
					}
				}
			}

			// From the host: the container's first process runs as
			// an unprivileged host uid, the block's base plus its
			// uid inside.
			pid := c.ContainerPid(t, "confined", ct.name)
			m, err := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", pid))
			if err != nil {
				t.Fatal(err)
			}
			f := strings.Fields(string(m))
			base := -1
			if len(f) == 3 {
				base, _ = strconv.Atoi(f[1])
			}
			if base < 65536 || f[0] != "0" || f[2] != "65536" {
				t.Fatalf("the container's process %d: uid_map %q, want 0 HOSTID 65536 (HOSTID above the host's usual ids)", pid, m)
			}
			if uids := statusIDs(t, pid, "Uid"); uids != strings.Repeat(" "+strconv.Itoa(base+ct.uid), 4) {
				t.Errorf("the container's process %d runs as host uids%s, want %d (its block %d + %d)", pid, uids, base+ct.uid, base, ct.uid)
			}
		})
	}

	// Both containers are in the pod's network namespace, each in a user
	// namespace of its own, none the host's.
	agent, sidecar := c.ContainerPid(t, "confined", "agent"), c.ContainerPid(t, "confined", "sidecar")
	ns := func(pid int, kind string) string {
		t.Helper()
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, kind))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	if a, s := ns(agent, "net"), ns(sidecar, "net"); a != s {
		t.Errorf("the pod's containers are in network namespaces %s and %s, want one", a, s)
	}
	host := ns(os.Getpid(), "user")
	if a, s := ns(agent, "user"), ns(sidecar, "user"); a == host || s == host || a == s {
		t.Errorf("user namespaces: agent %s, sidecar %s, host %s: want one of each container's own", a, s, host)
	}

	// On disk, the emptyDir's files have the owners they have inside:
	// the agent's root's is root's, the sidecar's uid 1000's; not a host
	// id of a block, not the overflow id.
	dir := c.EmptyDir(t, "confined", "shared")
	for name, want := range map[string]uint32{"from-agent": 0, "from-sidecar": 1000} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("the emptyDir on the host: %v", err)
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != want || st.Gid != want {
			t.Errorf("%s on the host is owned by %d:%d, want %d:%d", name, st.Uid, st.Gid, want, want)
		}
	}
	testTTY(t, c, "confined", "sidecar")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if r := c.Run(ctx, "", "exec", "confined", "-c", "agent", "--", "ls", "-ln", "/shared"); r.Err != nil || !strings.Contains(r.Stdout, " 1000 ") {
		t.Errorf("the sidecar's file in the agent's view: %s", r)
	}
	c.Kubectl(t, "delete", "pod", "confined", "--timeout=2m")

	// dev.hutch.network none: nothing of what the node policy "pod"
	// allows.
	c.KubectlIn(t, `apiVersion: v1
kind: Pod
metadata:
  name: offline
  annotations:
    dev.hutch.policy: pod
    dev.hutch.network: none
spec:
  runtimeClassName: hutch
  terminationGracePeriodSeconds: 0
  containers:
  - name: c
    image: `+ocitest.TestImage+`
    imagePullPolicy: Never
    command: ["sleep", "600"]
`, "apply", "-f", "-")
	c.Kubectl(t, "wait", "--for=condition=Ready", "pod/offline", "--timeout=3m")
	if r := c.Run(ctx, "", "exec", "offline", "--", "fetch", fmt.Sprintf("http://upstream.test:%d/", port)); r.Err == nil || strings.Contains(r.Stdout, "hello from") {
		t.Errorf("a pod of dev.hutch.network none reached the node policy's upstream: %s", r)
	}
	c.Kubectl(t, "delete", "pod", "offline", "--timeout=2m")

	// The node policy "scoped" is for the pods of the namespace default
	// only: a pod of another that names it does not start (its sandbox,
	// which holds the pod's proxy, is refused), and says why.
	c.KubectlIn(t, `apiVersion: v1
kind: Namespace
metadata:
  name: other
---
apiVersion: v1
kind: Pod
metadata:
  name: outside
  namespace: other
  annotations:
    dev.hutch.policy: scoped
spec:
  runtimeClassName: hutch
  containers:
  - name: c
    image: `+ocitest.TestImage+`
    imagePullPolicy: Never
    command: ["sleep", "600"]
`, "apply", "-f", "-")
	var why string
	if !testutil.Eventually(2*time.Minute, func() bool {
		why = c.Kubectl(t, "get", "events", "-n", "other", "--field-selector", "involvedObject.name=outside", "-o", "jsonpath={.items[*].message}")
		return strings.Contains(why, "kubernetes_namespaces") && strings.Contains(why, "not of other")
	}) {
		t.Errorf("a pod of another namespace naming the policy: events %q", why)
	}
	if phase := c.Kubectl(t, "get", "pod", "outside", "-n", "other", "-o", "jsonpath={.status.phase}"); phase != "Pending" {
		t.Errorf("the pod of another namespace is %s", phase)
	}
	c.Kubectl(t, "delete", "namespace", "other", "--timeout=2m")

	t.Run("gvisor", func(t *testing.T) { testRuntimeClassGVisor(t, c, port) })
}

// statusIDs returns the values of the line key (Uid, Gid) of
// /proc/PID/status, each after a space.
func statusIDs(t *testing.T, pid int, key string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return " " + strings.Join(strings.Fields(v), " ")
		}
	}
	t.Fatalf("/proc/%d/status has no %s line", pid, key)
	return ""
}

// hutchCluster starts a cluster whose runtime handler hutch is hutch-runc
// (the pods' dev.hutch.* annotations passed on) on the cluster's runc 1.5,
// and hutch-gvisor hutch-runc under gVisor's shim on runsc
// (gvisorRuntimeHandler), with the tests' image and the node's policies "pod", which allows the
// upstream.test that it serves on the node's loopback, and "serve", which
// lets a pod's own allow-list name it, and with images and handlers added;
// it returns the cluster and the upstream's port.
func hutchCluster(t *testing.T, images []string, handlers ...k8stest.RuntimeHandler) (*k8stest.Cluster, int) {
	t.Helper()
	bin := k8stest.BinDir(t)
	runc := k8stest.Runc(bin)
	if !ocitest.JoinsUserLast(t, runc) {
		t.Fatalf("%s is older than runc 1.2: its pods get no user namespace (scripts/k8s-binaries.sh builds runc 1.5)", runc)
	}
	rt := ocitest.HutchRunc(t)
	tar := ocitest.ImageTar(t)
	policies := t.TempDir()
	port := ocitest.LoopbackUpstream(t, "hello from the pod's upstream\n")
	ocitest.LoopbackPolicy(t, policies, "pod", "upstream.test", port)
	// "scoped": "pod" for the pods of the namespace default only.
	b, err := os.ReadFile(filepath.Join(policies, "pod.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(policies, "scoped.yaml"), append([]byte("containers:\n  kubernetes_namespaces: [default]\n"), b...), 0o644); err != nil {
		t.Fatal(err)
	}
	// "serve": hutch serve's sandboxes add the upstream to it themselves.
	if err := os.WriteFile(filepath.Join(policies, "serve.yaml"), []byte(`network:
  mode: proxy
  hosts: ["upstream.test:127.0.0.1"]
  allow_private: ["127.0.0.1/32"]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	gvisor, runscEnv := gvisorRuntimeHandler(t, rt)
	c := k8stest.StartCluster(t, k8stest.Options{
		Images:          append([]string{tar}, images...),
		RuntimeHandlers: append([]k8stest.RuntimeHandler{{Name: "hutch", BinaryName: rt, PodAnnotations: []string{"dev.hutch.*"}}, gvisor}, handlers...),
		// The runc shim's runtime, hutch-runc, hands the containers to
		// the cluster's runc; gVisor's shim's to runsc.
		ContainerdEnv: []string{ocitest.PolicyDirEnv + "=" + policies, ocitest.RuntimeEnv + "=" + runc, runscEnv},
	})
	return c, port
}

// noneAroundProxy fails the test for every line of the attacker's output
// (out) that says a TCP connection succeeded: the pod's connections go
// through the proxy alone.
func noneAroundProxy(t *testing.T, out string) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && strings.HasPrefix(f[0], "tcp:") && f[1] == "ok" {
			t.Errorf("a connection around the proxy: %q", line)
		}
	}
}
