//go:build linux

package k8s

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/client"
	"github.com/hutch-sandbox/hutch/internal/e2b"
	"github.com/hutch-sandbox/hutch/internal/kube"
	"github.com/hutch-sandbox/hutch/internal/testutil"
	"github.com/hutch-sandbox/hutch/internal/testutil/k8stest"
	"github.com/hutch-sandbox/hutch/internal/testutil/ocitest"
)

// daemonPods lists the names of the pods whose label hutch.dev/daemon is
// name.
func daemonPods(t *testing.T, c *k8stest.Cluster, name string) []string {
	t.Helper()
	return strings.Fields(c.Kubectl(t, "get", "pods", "-l", kube.LabelDaemon+"="+name, "-o", "jsonpath={.items[*].metadata.name}"))
}

// warmReady reports how many warm sandboxes p's log says became ready.
func (p *serveProc) warmReady() int {
	return strings.Count(p.log.String(), `msg="warm sandbox ready"`)
}

// testServeWarm: hutch serve --kubernetes --warm 2 (named warm, beside
// the cluster's other daemons) starts two pods before any create; a
// create with the default policy takes one of them in place, starting no
// pod of its own; the pool starts another; destroy deletes the taken
// pod, and the daemon's stop the warm ones. A pool of an image's policy
// (--warm base=1 of E2B's template) serves a create of that policy too;
// after a kill, the next daemon of the name deletes the warm pods it
// finds and takes the taken sandbox again.
func testServeWarm(t *testing.T, c *k8stest.Cluster) {
	const name, size = "warm", 2
	p := startServe(t, c, t.TempDir(), "--warm", "2", "--kubernetes-name", name)
	if !testutil.Eventually(3*time.Minute, func() bool { return p.warmReady() >= size }) {
		t.Fatalf("the pool did not fill: pods %v", daemonPods(t, c, name))
	}
	warm := daemonPods(t, c, name)
	if len(warm) != size {
		t.Fatalf("pods of the warm pool before any create: %v, want %d", warm, size)
	}
	cl := p.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := cl.Create(ctx, client.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if !slices.Contains(warm, "hutch-"+sb.ID) {
		t.Errorf("sandbox %s: its pod is not one of the pool's %v", sb.ID, warm)
	}
	// The daemon's log arrives through a pipe, after the answer maybe.
	if !testutil.Eventually(time.Minute, func() bool { return strings.Contains(p.log.String(), "warm=true") }) {
		t.Errorf("the create started cold:\n%s", p.log.String())
	}
	r, err := cl.Run(ctx, sb.ID, client.Command{Args: []string{"echo", "warm"}})
	if err != nil || string(r.Stdout) != "warm\n" {
		t.Errorf("run in the taken sandbox: %q %v", r.Stdout, err)
	}

	// The pool refills: another pod besides the taken one.
	if !testutil.Eventually(3*time.Minute, func() bool { return p.warmReady() >= size+1 }) {
		t.Fatalf("the pool did not refill: pods %v", daemonPods(t, c, name))
	}
	if got := daemonPods(t, c, name); len(got) != size+1 || !slices.Contains(got, "hutch-"+sb.ID) {
		t.Errorf("pods after the refill: %v, want %d with hutch-%s", got, size+1, sb.ID)
	}

	if err := cl.Destroy(ctx, sb.ID); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if !testutil.Eventually(2*time.Minute, func() bool {
		got := daemonPods(t, c, name)
		return len(got) == size && !slices.Contains(got, "hutch-"+sb.ID)
	}) {
		t.Errorf("pods after destroy: %v, want the pool's %d without hutch-%s", daemonPods(t, c, name), size, sb.ID)
	}
	p.stop(syscall.SIGTERM)
	if !testutil.Eventually(2*time.Minute, func() bool { return len(daemonPods(t, c, name)) == 0 }) {
		t.Errorf("the warm pods outlive the daemon's stop: %v", daemonPods(t, c, name))
	}

	// A pool of an image's policy (E2B's template base): its image is
	// the nodes' to pull, not in the daemon's store, and a create of the
	// same policy still takes its pod.
	const tname = "warm-image"
	tdir := t.TempDir()
	p = startServe(t, c, tdir, "--warm", "base=1", "--template", "base="+ocitest.TestImage, "--no-internet", "--kubernetes-name", tname)
	if !testutil.Eventually(3*time.Minute, func() bool { return p.warmReady() >= 1 }) {
		t.Fatalf("the template's pool did not fill: pods %v", daemonPods(t, c, tname))
	}
	warm = daemonPods(t, c, tname)
	spec, err := e2b.TemplatePolicy("base", map[string]string{"base": ocitest.TestImage}, false)
	if err != nil {
		t.Fatal(err)
	}
	// The policy as a client writes it: what the template's sets.
	pol := fmt.Appendf(nil, `{"root":%q,"filesystem":{"workspace":%q},"network":{"mode":%q}}`, spec.Root, spec.Filesystem.Workspace, spec.Network.Mode)
	cl = p.client(t)
	sb, err = cl.Create(ctx, client.CreateOptions{Policy: pol})
	if err != nil {
		t.Fatalf("create of the template's policy: %v", err)
	}
	if len(warm) != 1 || warm[0] != "hutch-"+sb.ID {
		t.Errorf("sandbox %s of the template's policy: its pod is not the pool's %v:\n%s", sb.ID, warm, p.log.String())
	}
	if r, err := cl.Run(ctx, sb.ID, client.Command{Args: []string{"echo", "warm"}}); err != nil || string(r.Stdout) != "warm\n" {
		t.Errorf("run in the template's sandbox: %q %v", r.Stdout, err)
	}

	// Killed, the daemon leaves its warm pod (refilled) and the taken
	// one; the next of its name takes the sandbox again and deletes the
	// warm pod.
	if !testutil.Eventually(3*time.Minute, func() bool { return p.warmReady() >= 2 }) {
		t.Fatalf("the template's pool did not refill: pods %v", daemonPods(t, c, tname))
	}
	var left []string
	for _, pod := range daemonPods(t, c, tname) {
		if pod != "hutch-"+sb.ID {
			left = append(left, pod)
		}
	}
	p.stop(syscall.SIGKILL)
	p = startServe(t, c, tdir, "--warm", "base=1", "--template", "base="+ocitest.TestImage, "--no-internet", "--kubernetes-name", tname)
	if !testutil.Eventually(3*time.Minute, func() bool {
		got := daemonPods(t, c, tname)
		return slices.Contains(got, "hutch-"+sb.ID) && !slices.ContainsFunc(left, func(pod string) bool { return slices.Contains(got, pod) })
	}) {
		t.Errorf("after the daemon's kill and restart: pods %v, want hutch-%s and none of the warm %v", daemonPods(t, c, tname), sb.ID, left)
	}
	if r, err := p.client(t).Run(ctx, sb.ID, client.Command{Args: []string{"echo", "again"}}); err != nil || string(r.Stdout) != "again\n" {
		t.Errorf("run in the template's sandbox after the restart: %q %v", r.Stdout, err)
	}
}
