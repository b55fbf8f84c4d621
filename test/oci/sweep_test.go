package oci

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/mountinfo"
	"github.com/hutch-sandbox/hutch/internal/testutil"
	"github.com/hutch-sandbox/hutch/internal/testutil/ocitest"
)

// TestContainerdSweepLost: the mounts directory of a container whose
// engine was lost — containerd, its shim and its process killed, its
// mounts gone with the engine's mount namespace and its runtime state
// with the tmpfs that held it, no delete and no poststop hook — is
// removed by the next create of any container, another engine's. The
// mounts directory of a container that runs is not touched, and it goes
// on running: neither one of the creating engine's nor one of an engine
// in another mount namespace, whose runtime state is on a tmpfs of that
// namespace's (as the test cluster's is), so that from here it looks
// gone.
func TestContainerdSweepLost(t *testing.T) {
	c, lostEngine := ocitest.StartContainerd(t), ocitest.StartContainerd(t)
	image := imageTar(t)
	c.Import(t, image)
	lostEngine.Import(t, image)
	rt := ocitest.HutchRunc(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	mountsOf := func(id string) string {
		t.Helper()
		dirs, _ := filepath.Glob("/run/hutch-runc/c/*-" + id)
		if len(dirs) != 1 {
			t.Fatalf("the mounts directory of %s: %v", id, dirs)
		}
		return dirs[0]
	}
	if r := c.Ctr(ctx, "run", "-d", "--runc-binary", rt, testImage, "sweep-kept", "sleep", "600"); r.Err != nil {
		t.Fatalf("run -d: %s", r)
	}
	if r := lostEngine.Ctr(ctx, "run", "-d", "--runc-binary", rt, testImage, "sweep-lost", "sleep", "600"); r.Err != nil {
		t.Fatalf("run -d: %s", r)
	}
	kept, lost := mountsOf("sweep-kept"), mountsOf("sweep-lost")
	other := startOtherNamespace(t, rt)
	other.run(t, "create", "--bundle", other.bundle, "sweep-elsewhere")
	other.run(t, "start", "sweep-elsewhere")
	elsewhere := mountsOf("sweep-elsewhere")
	if _, err := os.Stat(filepath.Join(other.root, "hutch", "sweep-elsewhere")); !os.IsNotExist(err) {
		t.Fatalf("the other namespace's state is seen here: %v", err)
	}
	loseEngine(t, lostEngine, "sweep-lost", lost)
	if _, err := os.Stat(lost); err != nil {
		t.Fatalf("the lost container's mounts directory is gone before any create: %v", err)
	}

	if r := c.Ctr(ctx, "run", "--rm", "--runc-binary", rt, testImage, "sweep-next", "true"); r.Err != nil {
		t.Fatalf("run after the engine's loss: %s", r)
	}
	if _, err := os.Stat(lost); !os.IsNotExist(err) {
		t.Errorf("the lost container's mounts directory %s is left (%v)", lost, err)
	}
	ms, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	mounted := false
	for _, m := range ms {
		mounted = mounted || m.Point == filepath.Join(kept, "rootfs")
	}
	if _, err := os.Stat(filepath.Join(kept, "resolv.conf")); err != nil || !mounted {
		t.Errorf("the running container's mounts directory %s was touched: rootfs mounted %v, %v", kept, mounted, err)
	}
	if r := c.Ctr(ctx, "tasks", "exec", "--exec-id", "e1", "sweep-kept", "sh", "-c", "cat /etc/resolv.conf >/dev/null && echo alive"); r.Err != nil || !strings.Contains(r.Stdout, "alive") {
		t.Errorf("exec in the running container after the sweep: %s", r)
	}
	theirs, err := os.ReadFile("/proc/" + strconv.Itoa(other.pid) + "/mountinfo")
	if _, serr := os.Stat(filepath.Join(elsewhere, "resolv.conf")); serr != nil || err != nil || !bytes.Contains(theirs, []byte(" "+filepath.Join(elsewhere, "rootfs")+" ")) {
		t.Errorf("the other namespace's container's mounts directory %s was touched: %v %v", elsewhere, serr, err)
	}
	if out := other.run(t, "state", "sweep-elsewhere"); !strings.Contains(out, `"running"`) {
		t.Errorf("the other namespace's container after the sweep: %s", out)
	}
	other.run(t, "delete", "--force", "sweep-elsewhere")
	if _, err := os.Stat(elsewhere); !os.IsNotExist(err) {
		t.Errorf("the other namespace's deleted container's mounts directory %s is left (%v)", elsewhere, err)
	}

	if r := c.Ctr(ctx, "tasks", "kill", "-s", "SIGKILL", "sweep-kept"); r.Err != nil {
		t.Fatalf("kill: %s", r)
	}
	if !testutil.Eventually(30*time.Second, func() bool {
		r := c.Ctr(ctx, "tasks", "ls")
		return !strings.Contains(r.Stdout, "RUNNING")
	}) {
		t.Fatalf("sweep-kept not stopped: %s", c.Ctr(ctx, "tasks", "ls"))
	}
	if r := c.Ctr(ctx, "tasks", "delete", "sweep-kept"); r.Err != nil {
		t.Errorf("tasks delete: %s", r)
	}
	if _, err := os.Stat(kept); !os.IsNotExist(err) {
		t.Errorf("the deleted container's mounts directory %s is left (%v)", kept, err)
	}
}

// otherNamespace is an engine of the test's in a mount namespace of its
// own: its pid, hutch-runc's root there (a tmpfs of that namespace's, on
// a directory that is empty here) and a bundle of busybox.
type otherNamespace struct {
	pid              int
	rt, root, bundle string
	policies         string
}

// startOtherNamespace starts the process that holds the other namespace
// (ended at the test's end, after its containers) and makes its bundle.
func startOtherNamespace(t *testing.T, rt string) *otherNamespace {
	t.Helper()
	ocitest.Need(t, "util-linux:nsenter", "busybox-static:busybox")
	o := &otherNamespace{rt: rt, root: t.TempDir(), bundle: t.TempDir(), policies: t.TempDir()}
	bin := filepath.Join(o.bundle, "rootfs", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err == nil {
		err = os.WriteFile(filepath.Join(bin, "busybox"), bb, 0o755)
	}
	for _, a := range []string{"sh", "sleep"} {
		if err == nil {
			err = os.Symlink("busybox", filepath.Join(bin, a))
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("runc", "spec", "--bundle", o.bundle).CombinedOutput(); err != nil {
		t.Fatalf("runc spec: %v\n%s", err, out)
	}
	var spec map[string]any
	b, err := os.ReadFile(filepath.Join(o.bundle, "config.json"))
	if err == nil {
		err = json.Unmarshal(b, &spec)
	}
	if err != nil {
		t.Fatal(err)
	}
	p := spec["process"].(map[string]any)
	p["terminal"], p["args"] = false, []string{"sleep", "600"}
	// The test's own name (t.TempDir's parent is), removed at its end.
	cgroup := "hutch-" + filepath.Base(filepath.Dir(o.root))
	spec["linux"].(map[string]any)["cgroupsPath"] = "/" + cgroup
	if b, err = json.Marshal(spec); err == nil {
		err = os.WriteFile(filepath.Join(o.bundle, "config.json"), b, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command("unshare", "--mount", "--propagation", "slave", "--", "sh", "-c", `mount -t tmpfs -o mode=0711 hutch-test "$1" && echo ready && exec sleep 600`, "sh", o.root)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	o.pid = cmd.Process.Pid
	t.Cleanup(func() {
		// Its container, if the test did not delete it.
		exec.Command("nsenter", "-t", strconv.Itoa(o.pid), "-m", "--", rt, "--root", o.root, "delete", "--force", "sweep-elsewhere").Run()
		cmd.Process.Kill()
		cmd.Wait()
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + cgroup)
		for _, d := range dirs {
			os.Remove(d)
		}
	})
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("the other mount namespace did not start: %q", line)
	}
	return o
}

// run runs hutch-runc with args in the other namespace, with its root and
// no node policy, and returns its output. The output goes to a file: a
// container made by create keeps the runtime's standard streams, and a
// pipe would stay open as long as it runs.
func (o *otherNamespace) run(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(o.pid), "-m", "--", o.rt, "--root", o.root, "--hutch-policy-dir", o.policies}, args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	err = cmd.Run()
	b, _ := os.ReadFile(out.Name())
	if err != nil {
		t.Fatalf("hutch-runc %v in the other namespace: %v\n%s", args, err, b)
	}
	return string(b)
}

// loseEngine leaves container id of engine c as an engine killed with its
// mount namespace leaves it: containerd, its shims and the container's
// process killed, what was mounted under its mounts directory mnt gone,
// its runtime state (runc's and hutch-runc's, in the namespace's tmpfs)
// gone, and nothing else done. Its cgroups, which runc's delete would
// have removed, are removed once empty.
func loseEngine(t *testing.T, c *ocitest.Containerd, id, mnt string) {
	t.Helper()
	root := "/run/containerd/runc/" + c.Namespace
	var st struct {
		Pid     int               `json:"init_process_pid"`
		Cgroups map[string]string `json:"cgroup_paths"`
	}
	b, err := os.ReadFile(filepath.Join(root, "runc", id, "state.json"))
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err != nil || st.Pid <= 0 {
		t.Fatalf("runc's state of %s: %v %s", id, err, b)
	}
	c.Kill()
	syscall.Kill(st.Pid, syscall.SIGKILL)
	// Its egress proxy ends with its process.
	stateDir := filepath.Join(root, "hutch", id)
	if !testutil.Eventually(30*time.Second, func() bool {
		return ended(st.Pid) && len(proxies(stateDir)) == 0
	}) {
		t.Fatalf("%s's process %d or its proxy %v did not end", id, st.Pid, proxies(stateDir))
	}
	ms, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for i := len(ms) - 1; i >= 0; i-- {
		if p := ms[i].Point; strings.HasPrefix(p, mnt+"/") {
			if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
				t.Fatalf("unmount %s: %v", p, err)
			}
		}
	}
	for _, d := range []string{stateDir, filepath.Join(root, "runc", id)} {
		if err := os.RemoveAll(d); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range st.Cgroups {
		if !testutil.Eventually(30*time.Second, func() bool {
			err := os.Remove(p)
			return err == nil || os.IsNotExist(err)
		}) {
			t.Errorf("remove the cgroup %s: %v", p, os.Remove(p))
		}
	}
}

// ended reports whether process pid has ended (a zombie has).
func ended(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return os.IsNotExist(err)
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && len(b) > i+2 && (b[i+2] == 'Z' || b[i+2] == 'X')
}
