package oci

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil"
	"github.com/hutch-sandbox/hutch/internal/testutil/ocitest"
)

func TestMain(m *testing.M) {
	before := hutchRuncLeft()
	code := m.Run()
	ocitest.RemoveBuilds()
	// Whatever the tests' containers were, hutch-runc left nothing
	// behind: its mounts and their directories, its proxies.
	if left := hutchRuncLeft(); len(left) > len(before) && code == 0 {
		fmt.Fprintf(os.Stderr, "hutch-runc left behind: %v (before the tests: %v)\n", left, before)
		code = 1
	}
	os.Exit(code)
}

// hutchRuncLeft lists hutch-runc's mounts directories, the mounts under
// them, and its
// egress proxies' pids, but not those of a Kubernetes cluster's
// containers (containerd namespace k8s.io: test/k8s's, which may run
// beside these tests).
func hutchRuncLeft() []string {
	var out []string
	// Not what .gone holds: a directory whose mount point another mount
	// namespace held (a sandbox of another package's tests, started
	// while the container ran, has a copy of the host's mounts) is moved
	// there, by design, and the next create's sweep removes it.
	dirs, _ := filepath.Glob("/run/hutch-runc/c/*")
	mine := map[string]bool{}
	for _, d := range dirs {
		var o struct {
			State string `json:"state"`
		}
		if strings.HasPrefix(filepath.Base(d), ".") {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(d, ".owner")); err == nil && json.Unmarshal(b, &o) == nil && clusters(o.State) {
			continue
		}
		mine[d] = true
		out = append(out, d)
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			for d := range mine {
				if strings.Contains(l, " "+d+"/") || strings.Contains(l, " "+d+" ") {
					out = append(out, l)
					break
				}
			}
		}
	}
	for _, pid := range proxies("") {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if !clusters(string(b)) {
			out = append(out, fmt.Sprintf("proxy %d", pid))
		}
	}
	return out
}

// clusters reports whether s names the state directory of a container
// in containerd's namespace of Kubernetes.
func clusters(s string) bool { return strings.Contains(s, "/runc/k8s.io/") }

// testImage is the tests' image (ocitest.ImageTar).
const testImage = ocitest.TestImage

// imageTar writes the tests' image.
func imageTar(t *testing.T) string { return ocitest.ImageTar(t) }

// TestContainerdRun: ctr run with hutch-runc as the runc binary runs the
// image's command confined — no_new_privs, two seccomp filters (the
// spec's and hutch's) or one (hutch's) — passes its output and exit code,
// and exec starts processes confined the same way.
func TestContainerdRun(t *testing.T) {
	c := ocitest.StartContainerd(t)
	c.Import(t, imageTar(t))
	rt := ocitest.HutchRunc(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	r := c.Ctr(ctx, "run", "--rm", "--runc-binary", rt, testImage, "c1", "sh", "-c", "grep -E '^(NoNewPrivs|Seccomp|Seccomp_filters):' /proc/self/status; echo pid $$; exit 7")
	if r.Code != 7 {
		t.Fatalf("exit code %d, want 7:\n%s", r.Code, r)
	}
	for _, want := range []string{"NoNewPrivs:\t1", "Seccomp:\t2", "Seccomp_filters:\t1", "pid 1"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("no %q in:\n%s", want, r)
		}
	}
	r = c.Ctr(ctx, "run", "--rm", "--seccomp", "--runc-binary", rt, testImage, "c2", "grep", "Seccomp_filters", "/proc/self/status")
	if r.Err != nil || !strings.Contains(r.Stdout, "Seccomp_filters:\t2") {
		t.Errorf("with the spec's filter: %s", r)
	}
	// hutch's table refuses a new user namespace, which the spec allows.
	r = c.Ctr(ctx, "run", "--rm", "--runc-binary", rt, testImage, "c3", "unshare", "-U", "true")
	if r.Code == 0 {
		t.Errorf("unshare -U in the container succeeded: %s", r)
	}
	if r := c.Ctr(ctx, "run", "--rm", "--runc-binary", rt, testImage, "c4", "no-such-program"); r.Code != 127 || !strings.Contains(r.Stderr+r.Stdout, "no-such-program") {
		t.Errorf("a missing program: %s", r)
	}

	// A policy the node does not have, or cannot read: the create fails
	// and containerd shows hutch-runc's reason.
	for ann, want := range map[string]string{
		"dev.hutch.policy=missing":    `the node has no policy "missing"`,
		"dev.hutch.policy=../../etc":  "is not a policy's name",
		"dev.hutch.allow-domains=a b": `annotation dev.hutch.allow-domains: allow-domain "a b"`,
	} {
		r = c.Ctr(ctx, "run", "--rm", "--annotation", ann, "--runc-binary", rt, testImage, "bad", "true")
		if r.Code == 0 || !strings.Contains(r.Stderr, want) {
			t.Errorf("annotation %s: %s", ann, r)
		}
	}

	// A create the low-level runtime fails (a mount of no filesystem),
	// after hutch-runc prepared the container: nothing of it is left.
	r = c.Ctr(ctx, "run", "--rm", "--mount", "type=nosuchfs,src=none,dst=/mnt/x,options=rw", "--runc-binary", rt, testImage, "failed-create", "true")
	if r.Code == 0 {
		t.Errorf("a mount of no filesystem: %s", r)
	}
	if left, _ := filepath.Glob("/run/hutch-runc/c/*-failed-create"); len(left) > 0 {
		t.Errorf("a failed create left %v", left)
	}
	if left, _ := filepath.Glob("/run/containerd/runc/" + c.Namespace + "/hutch/failed-create"); len(left) > 0 {
		t.Errorf("a failed create left its state %v", left)
	}

	// A root that is a directory (the native snapshotter's), read-only,
	// idmapped as it is.
	r = c.Ctr(ctx, "run", "--rm", "--snapshotter", "native", "--read-only", "--runc-binary", rt, testImage, "c6", "sh", "-c", "cat /proc/self/uid_map; ls -ln /bin/busybox; touch /x; echo rc=$?")
	if !strings.Contains(r.Stdout, "rc=1") || !strings.Contains(r.Stdout, " 0        0 ") || !strings.Contains(r.Stdout, " 65536") {
		t.Errorf("a read-only directory root: %s", r)
	}

	// A running container, and exec in it.
	if r := c.Ctr(ctx, "run", "-d", "--runc-binary", rt, testImage, "c5", "sleep", "600"); r.Err != nil {
		t.Fatalf("run -d: %s", r)
	}
	r = c.Ctr(ctx, "tasks", "exec", "--exec-id", "e1", "c5", "sh", "-c", "grep NoNewPrivs /proc/self/status; echo exec out; exit 3")
	if r.Code != 3 || !strings.Contains(r.Stdout, "NoNewPrivs:\t1") || !strings.Contains(r.Stdout, "exec out") {
		t.Errorf("exec: %s", r)
	}
	if r := c.Ctr(ctx, "tasks", "kill", "-s", "SIGKILL", "c5"); r.Err != nil {
		t.Errorf("kill: %s", r)
	}
	if !testutil.Eventually(30*time.Second, func() bool {
		return strings.Contains(c.Ctr(ctx, "tasks", "ls").Stdout, "STOPPED")
	}) {
		t.Errorf("c5 not stopped: %s", c.Ctr(ctx, "tasks", "ls"))
	}
	if r := c.Ctr(ctx, "tasks", "delete", "c5"); r.Err != nil {
		t.Errorf("tasks delete: %s", r)
	}
	if r := c.Ctr(ctx, "containers", "delete", "c5"); r.Err != nil {
		t.Errorf("containers delete: %s", r)
	}
}

// TestCheck: hutch-runc check tells what the node offers, item by item,
// and fails naming the file and line of a bad node policy.
func TestCheck(t *testing.T) {
	ocitest.Need(t, "runc")
	rt := ocitest.HutchRunc(t)
	dir := t.TempDir()
	out, err := exec.Command(rt, "--hutch-policy-dir", dir, "check").CombinedOutput()
	if err != nil {
		t.Fatalf("check: %v\n%s", err, out)
	}
	for _, want := range []string{"ok       low-level runtime: ", "ok       Landlock: ABI ", "ok       seccomp", "ok       user namespaces and idmapped mounts", "ok       nftables", "ok       node policies: none in"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("network:\n  allowed_domains: [\"a b\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(rt, "--hutch-policy-dir", dir, "check").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "missing  node policies: ") || !strings.Contains(string(out), "bad.yaml:2:") {
		t.Errorf("a bad policy: %v\n%s", err, out)
	}
}

// TestCheckHost: check --host checks a node from a pod that has its root
// mounted (here a directory of the test): its runtime is the one under that
// root, run there (the machine's runc without its libraries does not run),
// its policies are under that root, and it is not ready until install has
// put hutch-runc and its drop-in there. (test/k8s TestRuntimeInstaller
// has a node whose runtime runs: the DaemonSet's probe.)
func TestCheckHost(t *testing.T) {
	ocitest.Need(t, "runc")
	rt := ocitest.HutchRunc(t)
	host := t.TempDir()
	for _, d := range []string{"tmp", "run", "usr/sbin", "etc/hutch/policies"} {
		if err := os.MkdirAll(filepath.Join(host, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	check := func(want ...string) {
		t.Helper()
		out, err := exec.Command(rt, "check", "--host", host).CombinedOutput()
		if err == nil {
			t.Errorf("check --host of a node whose runtime does not run: ready\n%s", out)
		}
		for _, w := range want {
			if !strings.Contains(string(out), w) {
				t.Errorf("no %q in:\n%s", w, out)
			}
		}
	}
	check("the node (" + host + ") has no runc or crun in /usr/local/sbin")

	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(runc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host, "usr/sbin/runc"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	check("missing  low-level runtime: /usr/sbin/runc --version: ", "ok       Landlock", "ok       user namespaces and idmapped mounts: on "+host+"/tmp, "+host+"/run",
		"ok       node policies: none in "+host+"/etc/hutch/policies", "missing  installation: "+host+"/usr/local/bin/hutch-runc: absent")

	if out, err := exec.Command(rt, "install", "--host", host).CombinedOutput(); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(host, "etc/hutch/policies/bad.yaml"), []byte("network:\n  allowed_domains: [\"a b\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	check(`ok       installation: /usr/local/bin/hutch-runc, the runtime handler "hutch" in /etc/containerd/conf.d/hutch.toml`,
		"absent   containerd imports the drop-in: "+host+"/etc/containerd/config.toml does not exist",
		"missing  node policies: ", host+"/etc/hutch/policies/bad.yaml:2:")
}

// TestContainerdRecreateWhileHeld: a container's mounts copied into another
// mount namespace while it ran (any private mount namespace made then:
// hutch's own sandboxes, a service's PrivateTmp) do not stop its delete,
// nor a container of the same ID after it (docker restart), and hutch-runc
// removes what they held once that namespace has ended.
func TestContainerdRecreateWhileHeld(t *testing.T) {
	c := ocitest.StartContainerd(t)
	c.Import(t, imageTar(t))
	rt := ocitest.HutchRunc(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	stop := func(id string) {
		t.Helper()
		if r := c.Ctr(ctx, "tasks", "kill", "-s", "SIGKILL", id); r.Err != nil {
			t.Fatalf("kill %s: %s", id, r)
		}
		if !testutil.Eventually(30*time.Second, func() bool {
			return strings.Contains(c.Ctr(ctx, "tasks", "ls").Stdout, "STOPPED")
		}) {
			t.Fatalf("%s not stopped: %s", id, c.Ctr(ctx, "tasks", "ls"))
		}
		if r := c.Ctr(ctx, "tasks", "delete", id); r.Err != nil {
			t.Fatalf("tasks delete %s: %s", id, r)
		}
		if r := c.Ctr(ctx, "containers", "delete", id); r.Err != nil {
			t.Fatalf("containers delete %s: %s", id, r)
		}
	}
	if r := c.Ctr(ctx, "run", "-d", "--runc-binary", rt, testImage, "held", "sleep", "600"); r.Err != nil {
		t.Fatalf("run -d: %s", r)
	}
	// A mount namespace of a user namespace's: the copies of the
	// container's mounts in it are locked there.
	holder := exec.Command("unshare", "-Urm", "--propagation", "private", "sh", "-c", "echo in; exec sleep 600")
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	held := true
	release := func() {
		if held {
			held = false
			holder.Process.Kill()
			holder.Wait()
		}
	}
	defer release()
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatalf("the holder did not start: %v", err)
	}
	stop("held")
	if r := c.Ctr(ctx, "run", "-d", "--runc-binary", rt, testImage, "held", "sleep", "600"); r.Err != nil {
		t.Fatalf("the same ID again while the first one's mounts are held: %s", r)
	}
	stop("held")
	release()
	// The next create removes what was held.
	if r := c.Ctr(ctx, "run", "--rm", "--runc-binary", rt, testImage, "after", "true"); r.Err != nil {
		t.Fatalf("run after the holder's end: %s", r)
	}
	if left, _ := filepath.Glob("/run/hutch-runc/c/.gone/*"); len(left) > 0 {
		t.Errorf("left after the holder's end: %v", left)
	}
}
