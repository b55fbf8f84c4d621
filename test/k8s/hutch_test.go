//go:build linux

package k8s

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil/k8stest"
	"github.com/hutch-sandbox/hutch/internal/testutil/ocitest"
)

// runtimeClassYAMLHutch is the RuntimeClass hutch, of hutchCluster's
// handler, and the start of a document after it.
const runtimeClassYAMLHutch = `apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: hutch
handler: hutch
---
`

// hutchPodYAML is a pod of the RuntimeClass hutch whose egress policy
// the node's policy "pod" decides (the annotation).
const hutchPodYAML = runtimeClassYAMLHutch + `apiVersion: v1
kind: Pod
metadata:
  name: confined
  annotations:
    dev.hutch.policy: pod
spec:
  runtimeClassName: hutch
  terminationGracePeriodSeconds: 5
  containers:
  - name: agent
    image: ` + ocitest.TestImage + `
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]
`

// TestRuntimeClassHutch: a pod of the RuntimeClass hutch (containerd 2's
// CRI, the runc shim with hutch-runc as its runtime, the pod's dev.hutch.*
// annotations passed on) runs confined as under Docker: Landlock and
// hutch's seccomp (no new user namespace, no netlink), no_new_privs, and the node
// policy the pod names for its egress — the allowed upstream through the
// proxy, nothing around it. kubectl exec goes through the same. (A user
// namespace of its own needs runc 1.2 or later: the pod joins the
// network namespace CRI made.)
func TestRuntimeClassHutch(t *testing.T) {
	c, port := hutchCluster(t)
	c.KubectlIn(t, hutchPodYAML, "apply", "-f", "-")
	c.Kubectl(t, "wait", "--for=condition=Ready", "pod/confined", "--timeout=3m")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := c.Run(ctx, "", "exec", "confined", "--", "sh", "-c",
		fmt.Sprintf("grep -E '^(NoNewPrivs|Seccomp_filters):' /proc/self/status; cat /proc/self/uid_map; fetch http://upstream.test:%d/; attacker unshare:user socket:netlink tcp:127.0.0.2:%d", port, port))
	out := r.Stdout
	if r.Err != nil {
		t.Errorf("kubectl exec: %s", r)
	}
	for _, want := range []string{"NoNewPrivs:\t1", "hello from the pod's upstream", "unshare:user EPERM", "socket:netlink ENOTSUP"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	noneAroundProxy(t, out)
	// A pod's containers join the network namespace CRI made: they get
	// a user namespace of hutch-runc's with runc 1.2 and later only.
	if ocitest.RuncJoinsUserLast(t) && !strings.Contains(out, " 65536") {
		t.Errorf("no user namespace of 65536 ids:\n%s", out)
	}
	c.Kubectl(t, "delete", "pod", "confined", "--timeout=2m")
}

// hutchCluster starts a cluster whose runtime handler hutch is hutch-runc
// (the pods' dev.hutch.* annotations passed on), with the tests' image and
// the node's policy "pod", which allows the upstream.test that it serves
// on the node's loopback; it returns the cluster and the upstream's port.
func hutchCluster(t *testing.T) (*k8stest.Cluster, int) {
	t.Helper()
	k8stest.BinDir(t)
	rt := ocitest.HutchRunc(t)
	tar := ocitest.ImageTar(t)
	policies := t.TempDir()
	port := ocitest.LoopbackUpstream(t, "hello from the pod's upstream\n")
	ocitest.LoopbackPolicy(t, policies, "pod", "upstream.test", port)
	c := k8stest.StartCluster(t, k8stest.Options{
		Images:          []string{tar},
		RuntimeHandlers: []k8stest.RuntimeHandler{{Name: "hutch", BinaryName: rt, PodAnnotations: []string{"dev.hutch.*"}}},
		ContainerdEnv:   []string{ocitest.PolicyDirEnv + "=" + policies},
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
