package oci

import (
	"context"
	"strings"
	"testing"
	"time"

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

	if r := d.Run(ctx, "run", "-d", "--name", "long", "--runtime", "hutch", testImage, "sleep", "600"); r.Err != nil {
		t.Fatalf("run -d: %s", r)
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
	if r := d.Run(ctx, "rm", "long"); r.Err != nil {
		t.Errorf("rm: %s", r)
	}
}
