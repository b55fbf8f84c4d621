//go:build linux

package k8s

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/ociruntime"
	"github.com/hutch-sandbox/hutch/internal/testutil"
	"github.com/hutch-sandbox/hutch/internal/testutil/k8stest"
	"github.com/hutch-sandbox/hutch/internal/testutil/ocitest"
)

// gvisorHandler is the runtime handler, and RuntimeClass, of the gVisor
// tier (kube.DefaultRuntimeClasses).
const gvisorHandler = "hutch-gvisor"

// gvisorRuntimeHandler is the runtime handler hutch-gvisor of
// hutchCluster: gVisor's shim, whose runsc is hutch-runc under the name
// hutch-runsc (rt is hutch-runc's binary), handing the pods to runsc; and
// the variable of containerd's environment that names that runsc (the
// shim's cleanup of a container calls its runsc without runsc_config's
// flags).
func gvisorRuntimeHandler(t *testing.T, rt string) (k8stest.RuntimeHandler, string) {
	t.Helper()
	runsc := testutil.Runsc(t)
	shim := testutil.RunscShim(t)
	link := filepath.Join(t.TempDir(), "hutch-runsc")
	if err := os.Symlink(rt, link); err != nil {
		t.Fatal(err)
	}
	return k8stest.RuntimeHandler{Name: gvisorHandler, BinaryName: link, PodAnnotations: []string{"dev.hutch.*"}, RunscShim: shim},
		ociruntime.RunscEnv + "=" + runsc
}

// gvisorPodYAML is a pod of the RuntimeClass hutch-gvisor whose egress
// the node's policy "pod" decides.
const gvisorPodYAML = `apiVersion: v1
kind: Pod
metadata:
  name: gvisor
  annotations:
    dev.hutch.policy: pod
spec:
  runtimeClassName: ` + gvisorHandler + `
  terminationGracePeriodSeconds: 5
  containers:
  - name: c
    image: ` + ocitest.TestImage + `
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]
`

// testRuntimeClassGVisor: a pod of the RuntimeClass hutch-gvisor
// (gVisor's shim with hutch-runc as its runsc, which puts the pod's
// container in the Sentry of its sandbox) runs on
// gVisor's kernel with hutch's egress as under the RuntimeClass hutch:
// the node policy's upstream through the proxy, another host refused by
// it, and nothing around it — not even the node, on the pods' bridge,
// which a pod without hutch's firewall reaches; kubectl exec works, on a
// terminal too. Its
// delete leaves no runsc process or state, no egress proxy, no shim.
func testRuntimeClassGVisor(t *testing.T, c *k8stest.Cluster, port int) {
	around := bridgeListener(t, c)
	defer func() {
		if !t.Failed() {
			return
		}
		logs, _ := filepath.Glob(filepath.Join(c.ShimLogDir(gvisorHandler), "*"))
		for _, p := range logs {
			b, _ := os.ReadFile(p)
			t.Logf("%s:\n%s", p, b)
		}
	}()

	begin := time.Now()
	c.KubectlIn(t, gvisorPodYAML, "apply", "-f", "-")
	c.Kubectl(t, "wait", "--for=condition=Ready", "pod/gvisor", "--timeout=3m")
	t.Logf("gVisor pod Ready %v after it was created", time.Since(begin).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := c.Run(ctx, "", "exec", "gvisor", "--", "sh", "-c", fmt.Sprintf(
		"dmesg | head -1; fetch http://upstream.test:%[1]d/; fetch http://elsewhere.test:%[1]d/; attacker tcp:%[2]s", port, around))
	if r.Err != nil {
		t.Errorf("kubectl exec: %s", r)
	}
	for _, want := range []string{"gVisor", "hello from the pod's upstream", "status 403", "tcp:" + around + " "} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("no %q in:\n%s", want, r.Stdout)
		}
	}
	noneAroundProxy(t, r.Stdout)
	testTTY(t, c, "gvisor", "c")

	root := c.RunscRoot(gvisorHandler)
	if left := stateFiles(t, root); len(left) == 0 {
		t.Errorf("no state of runsc or hutch-runc under %s while the pod runs: is it the shim's root?", root)
	}
	begin = time.Now()
	c.Kubectl(t, "delete", "pod", "gvisor", "--timeout=2m")
	t.Logf("gVisor pod deleted in %v", time.Since(begin).Round(time.Millisecond))
	var procs, files []string
	if !testutil.Eventually(time.Minute, func() bool {
		procs = append(processesWith(root), processesWith(testutil.RunscShimName, c.ContainerdSocket)...)
		files = stateFiles(t, root)
		return len(procs) == 0 && len(files) == 0
	}) {
		t.Errorf("left after the pod's delete: processes %q, files %q", procs, files)
	}
}

// bridgeListener is the address of a server of the node's on the pods'
// bridge (NodeOnBridge), which a pod's packets reach without a router, and
// which closes every connection it takes; it stops when the test ends.
func bridgeListener(t *testing.T, c *k8stest.Cluster) string {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(c.NodeOnBridge(t).String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	return l.Addr().String()
}

// stateFiles lists the files (not directories) under root but runsc's
// null-netns, which its root keeps for every sandbox.
func stateFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Name() != "null-netns" {
			out = append(out, p)
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return out
}

// processesWith lists the command lines of the processes whose command
// line has every one of words.
func processesWith(words ...string) []string {
	var out []string
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if !slices.ContainsFunc(words, func(w string) bool { return !strings.Contains(string(b), w) }) {
			out = append(out, p+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}
