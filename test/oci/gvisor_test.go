package oci

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil"
	"github.com/hutch-sandbox/hutch/internal/testutil/ocitest"
)

// TestDockerGVisor: hutch-runc's gVisor tier (--hutch-tier gvisor, or
// its binary named hutch-runsc) runs a container on gVisor's kernel, not
// the host's, with hutch's egress as under runc: what the policy allows
// through the proxy, nothing around it; exec works.
func TestDockerGVisor(t *testing.T) {
	runsc := testutil.Runsc(t)
	policies := t.TempDir()
	rt := ocitest.HutchRunc(t)
	link := filepath.Join(t.TempDir(), "hutch-runsc")
	if err := os.Symlink(rt, link); err != nil {
		t.Fatal(err)
	}
	d := ocitest.StartDocker(t, map[string]ocitest.Runtime{
		"hutch-gvisor": {Path: rt, Args: []string{"--hutch-tier", "gvisor", "--hutch-runsc", runsc, "--hutch-policy-dir", policies, "--hutch-policy", "allowed"}},
		"hutch-runsc":  {Path: link, Args: []string{"--hutch-runsc", runsc, "--hutch-policy-dir", policies}},
	})
	d.Load(t, imageTar(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	port := gatewayUpstream(t, ctx, d, policies)
	r := d.Run(ctx, "run", "--rm", "--runtime", "hutch-gvisor", testImage, "sh", "-c", fmt.Sprintf(
		"dmesg | head -1; fetch http://allowed.test:%[1]d/through; attacker tcp:%[2]s:%[1]d", port, dockerGateway))
	for _, want := range []string{"gVisor", "hello from upstream /through", "tcp:" + dockerGateway} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("no %q in:\n%s", want, r)
		}
	}
	// The firewall's refusal: a reset under runc; gVisor's kernel
	// reports the ICMP answers it gets as an unreachable network.
	if !strings.Contains(r.Stdout, " ECONNREFUSED") && !strings.Contains(r.Stdout, " ENETUNREACH") {
		t.Errorf("a connection around the proxy: %s", r)
	}
	if r := d.Run(ctx, "run", "-d", "--name", "gv", "--runtime", "hutch-runsc", testImage, "sleep", "600"); r.Err != nil {
		t.Fatalf("run -d under the name hutch-runsc: %s", r)
	}
	r = d.Run(ctx, "exec", "gv", "sh", "-c", "dmesg | head -1; fetch http://allowed.test/")
	if !strings.Contains(r.Stdout, "gVisor") || !strings.Contains(r.Stdout, "status 403") {
		t.Errorf("exec under gVisor (no policy: refused): %s", r)
	}
}
