package oci

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil"
	"github.com/hutch-sandbox/hutch/internal/testutil/ocitest"
)

// TestDockerRun: docker run --runtime hutch runs the image confined — its
// default seccomp profile and hutch's stacked, no_new_privs although
// Docker does not ask for it — with its output, exit code, environment,
// user and working directory; docker exec the same; a stopped
// container's exit code is kept, and docker rm removes it.
func TestDockerRun(t *testing.T) {
	d := ocitest.StartDocker(t, map[string]ocitest.Runtime{"hutch": {Path: ocitest.HutchRunc(t)}})
	d.Load(t, imageTar(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	r := d.Run(ctx, "run", "--rm", "--runtime", "hutch", "-e", "GREETING=hello", "-u", "4242:4343", "-w", "/tmp", testImage,
		"sh", "-c", "grep -E '^(NoNewPrivs|Seccomp_filters):' /proc/self/status; echo $GREETING; id -u; id -g; pwd; exit 9")
	if r.Code != 9 {
		t.Fatalf("exit code %d, want 9:\n%s", r.Code, r)
	}
	for _, want := range []string{"NoNewPrivs:\t1", "Seccomp_filters:\t2", "hello\n4242\n4343\n/tmp\n"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("no %q in:\n%s", want, r)
		}
	}

	// A user namespace: the image's files and a volume's show their
	// owners as on disk, root writes its root and the volume, and what it
	// writes lands on disk with the ids it has inside; its processes are
	// no host root's (S1).
	vol := t.TempDir()
	if err := os.WriteFile(filepath.Join(vol, "users"), []byte("a user's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(vol, "users"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	r = d.Run(ctx, "run", "--rm", "--runtime", "hutch", "-v", vol+":/data", testImage, "sh", "-c",
		"cat /proc/self/uid_map; ls -ln /bin/busybox /data/users; touch /new && echo wrote-root; echo hi > /data/root-made && echo wrote-volume")
	if r.Err != nil {
		t.Fatalf("user namespace: %s", r)
	}
	if f := strings.Fields(r.Stdout); len(f) < 3 || f[0] != "0" || f[1] < "1610612736" || len(f[1]) != 10 || f[2] != "65536" {
		t.Errorf("uid_map: %s", r)
	}
	for _, want := range []string{" 0        0 ", "1000     1000", "wrote-root", "wrote-volume"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("no %q in:\n%s", want, r)
		}
	}
	if fi, err := os.Stat(filepath.Join(vol, "root-made")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("the file root made in the volume: %v %+v", err, fi)
	}

	if r := d.Run(ctx, "run", "-d", "--name", "long", "--runtime", "hutch", testImage, "sleep", "600"); r.Err != nil {
		t.Fatalf("run -d: %s", r)
	}
	r = d.Run(ctx, "inspect", "-f", "{{.State.Pid}}", "long")
	status, err := os.ReadFile("/proc/" + strings.TrimSpace(r.Stdout) + "/status")
	if err != nil {
		t.Fatalf("the container's process: %v %s", err, r)
	}
	for _, l := range strings.Split(string(status), "\n") {
		if f := strings.Fields(l); len(f) == 5 && (f[0] == "Uid:" || f[0] == "Gid:") {
			for _, id := range f[1:] {
				if n, _ := strconv.Atoi(id); n < 1610612736 {
					t.Errorf("the container's root is host id %d: %s", n, l)
				}
			}
		}
	}
	r = d.Run(ctx, "exec", "long", "sh", "-c", "grep NoNewPrivs /proc/self/status; exit 4")
	if r.Code != 4 || !strings.Contains(r.Stdout, "NoNewPrivs:\t1") {
		t.Errorf("exec: %s", r)
	}
	if r := d.Run(ctx, "kill", "long"); r.Err != nil {
		t.Errorf("kill: %s", r)
	}
	if r := d.Run(ctx, "wait", "long"); strings.TrimSpace(r.Stdout) != "137" {
		t.Errorf("wait after kill: %s", r)
	}
	id := strings.TrimSpace(d.Run(ctx, "inspect", "-f", "{{.Id}}", "long").Stdout)
	if r := d.Run(ctx, "rm", "long"); r.Err != nil {
		t.Errorf("rm: %s", r)
	}
	// Nothing of hutch-runc's is left: its mounts and their directory,
	// its work directory beside Docker's upper layer.
	if left, _ := filepath.Glob(filepath.Join(d.DataRoot(), "overlay2", "*", "hutch-work")); len(left) > 0 {
		t.Errorf("overlay work directories left: %v", left)
	}
	if left, _ := filepath.Glob("/run/hutch-runc/c/*-" + id); id == "" || len(left) > 0 {
		t.Errorf("the container's mounts directory is left (id %q): %v", id, left)
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); id == "" || strings.Contains(string(b), id) {
		t.Errorf("mounts of the container left (id %q)", id)
	}
}

// TestDockerLifecycle: what Docker asks of a runtime besides run and exec
// works with hutch-runc — a terminal, memory and pid limits (the OOM
// killer ends a container over its memory, reported as such), docker
// top (ps), pause and unpause, update, stats, restart with its writes
// kept, and a read-only root.
func TestDockerLifecycle(t *testing.T) {
	d := ocitest.StartDocker(t, map[string]ocitest.Runtime{"hutch": {Path: ocitest.HutchRunc(t)}})
	d.Load(t, imageTar(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run := func(args ...string) ocitest.Result {
		return d.Run(ctx, append([]string{"run", "--rm", "--runtime", "hutch"}, args...)...)
	}

	if r := run("-t", testImage, "sh", "-c", "tty; test -t 0 && echo terminal"); !strings.Contains(r.Stdout, "/dev/pts/") || !strings.Contains(r.Stdout, "terminal") {
		t.Errorf("-t: %s", r)
	}
	if r := run("-m", "64m", "--pids-limit", "50", testImage, "sh", "-c", "cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/pids/pids.max"); !strings.Contains(r.Stdout, "67108864\n50") {
		t.Errorf("limits: %s", r)
	}
	if r := run("--read-only", testImage, "sh", "-c", "touch /x; echo rc=$?"); !strings.Contains(r.Stdout, "rc=1") {
		t.Errorf("--read-only: %s", r)
	}
	if r := d.Run(ctx, "run", "--name", "oom", "--runtime", "hutch", "-m", "32m", "--memory-swap", "32m", testImage, "attacker", "alloc:256"); r.Code != 137 {
		t.Errorf("over its memory: %s", r)
	}
	// The OOM event reaches dockerd apart from the exit: on a busy
	// machine after it, when dockerd no longer marks the container
	// OOMKilled but still reports the event.
	var oom, events ocitest.Result
	if !testutil.Eventually(time.Minute, func() bool {
		oom = d.Run(ctx, "inspect", "-f", "{{.State.OOMKilled}}", "oom")
		events = d.Run(ctx, "events", "--since", "0", "--until", "0s", "--filter", "container=oom", "--filter", "event=oom")
		return strings.TrimSpace(oom.Stdout) == "true" || strings.Contains(events.Stdout, " oom ")
	}) {
		t.Errorf("not reported as killed for its memory: OOMKilled %s; events %s", oom, events)
	}

	if r := d.Run(ctx, "run", "-d", "--name", "svc", "--runtime", "hutch", testImage, "sh", "-c", "echo $$ > /pid1; sleep 600"); r.Err != nil {
		t.Fatalf("run -d: %s", r)
	}
	if r := d.Run(ctx, "top", "svc"); !strings.Contains(r.Stdout, "sleep 600") {
		t.Errorf("top: %s", r)
	}
	if r := d.Run(ctx, "pause", "svc"); r.Err != nil {
		t.Errorf("pause: %s", r)
	}
	if r := d.Run(ctx, "inspect", "-f", "{{.State.Status}}", "svc"); strings.TrimSpace(r.Stdout) != "paused" {
		t.Errorf("paused: %s", r)
	}
	if r := d.Run(ctx, "unpause", "svc"); r.Err != nil {
		t.Errorf("unpause: %s", r)
	}
	if r := d.Run(ctx, "update", "--memory", "96m", "--memory-swap", "96m", "svc"); r.Err != nil {
		t.Errorf("update: %s", r)
	}
	if r := d.Run(ctx, "exec", "svc", "cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes"); strings.TrimSpace(r.Stdout) != "100663296" {
		t.Errorf("after update: %s", r)
	}
	if r := d.Run(ctx, "stats", "--no-stream", "--format", "{{.MemUsage}}", "svc"); !strings.Contains(r.Stdout, "96MiB") {
		t.Errorf("stats: %s", r)
	}
	if r := d.Run(ctx, "exec", "svc", "sh", "-c", "echo kept > /state"); r.Err != nil {
		t.Errorf("write: %s", r)
	}
	if r := d.Run(ctx, "restart", "-t", "1", "svc"); r.Err != nil {
		t.Errorf("restart: %s", r)
	}
	if r := d.Run(ctx, "exec", "svc", "cat", "/state"); strings.TrimSpace(r.Stdout) != "kept" {
		t.Errorf("after restart: %s", r)
	}
}
