package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// e2bDir holds the JavaScript test of E2B's SDK and its pinned
// dependencies (package.json, package-lock.json; node_modules is made by
// npm ci, as scripts/test.sh does).
var e2bDir = filepath.Join("..", "..", "test", "e2b")

// nodeForE2B is testutil.NodeForE2B of test/e2b.
func nodeForE2B() (string, string) { return testutil.NodeForE2B(e2bDir) }

// TestE2BSDK runs E2B's JavaScript SDK, unchanged, against hutch serve:
// test/e2b/sdk.test.mjs with node's test runner, E2B_API_URL and
// E2B_SANDBOX_URL set to the daemon's TCP listener and E2B_API_KEY to a
// token made by `hutch token create --e2b`. The daemon has a template,
// bb, of a busybox image imported into its state directory before it
// started, with a warm pool of one (--template bb=REF --warm bb=1): the
// SDK's Sandbox.create('bb') takes the warm sandbox, as the daemon's
// metrics say after the run.
func TestE2BSDK(t *testing.T) {
	t.Parallel()
	e2bSDK(t, "e2b", "namespace")
}

// TestE2BSDKReleases is TestE2BSDK with earlier releases of E2B's
// JavaScript SDK, pinned in test/e2b/package.json as aliases: 2.10.4 (the
// oldest of the last year), 2.30.5, 2.45.0 (the one E2B's own suite of
// docs/e2b-suite.md tests) and 2.50.0. The releases before 2.51, and the
// Python SDK, connect by POST /sandboxes/{id}/connect, 2.51 by
// /v2/sandboxes/{id}/connect; what a release lacks (getMetrics,
// updateNetwork, snapshots) its tests skip, saying so. Reduced runs
// (HUTCH_E2B_SUITES, HUTCH_E2B_REDUCED): the suites whose calls changed
// between releases — the control plane (create, connect, list, pause,
// network settings), a template's create and envd's commands, files and
// terminals — run; template builds, files' metadata and signed URLs,
// metrics and snapshots are tested with the pinned release only. The
// suite runs 2.10, 2.45 and 2.50, the releases at the API's edges and E2B's
// own suite's (the suite's time on two cores); HUTCH_TEST_E2B_RELEASES
// names others (e2b-2.30, or "all").
func TestE2BSDKReleases(t *testing.T) {
	t.Parallel()
	releases := []string{"e2b-2.10", "e2b-2.45", "e2b-2.50"}
	switch v := os.Getenv("HUTCH_TEST_E2B_RELEASES"); v {
	case "":
	case "all":
		releases = []string{"e2b-2.10", "e2b-2.30", "e2b-2.45", "e2b-2.50"}
	default:
		releases = strings.Split(v, ",")
	}
	for _, sdk := range releases {
		t.Run(sdk, func(t *testing.T) {
			t.Parallel()
			e2bSDKWith(t, sdk, "namespace", []string{
				"HUTCH_E2B_SUITES=" + strings.Join(releaseSuites, ","),
				"HUTCH_E2B_REDUCED=an earlier release: its control plane, templates and envd's commands, files and terminals are tested; template builds, metadata, signed URLs, metrics and snapshots with the pinned one"})
		})
	}
}

// releaseSuites are the suites of test/e2b/sdk.test.mjs that
// TestE2BSDKReleases runs with each earlier release.
var releaseSuites = []string{"control plane", "templates", "envd", "envd: commands", "envd: pty", "envd: files"}

// TestE2BSDKGVisor is TestE2BSDK against a daemon whose default tier is
// gVisor: every sandbox the SDK makes, the template's warm one included,
// runs under gVisor. A reduced run: the snapshot test, the suite's
// slowest, is left out (a gVisor sandbox's snapshots and forks with their
// memory are internal/daemon's TestGVisorSnapshotMemory and
// TestGVisorSnapshotImage, through the API the same as the namespace
// tier's).
func TestE2BSDKGVisor(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	e2bSDKWith(t, "e2b", "gvisor", []string{"HUTCH_E2B_REDUCED=gVisor; its snapshots of memory are internal/daemon's TestGVisorSnapshotMemory"},
		"--default-tier", "gvisor", "--runsc", testutil.Runsc(t))
}

// TestE2BSDKMicroVM is TestE2BSDK against a daemon whose default tier is
// microvm (--allow-emulation: QEMU's software emulation where the host
// has no KVM a guest can use): every sandbox the SDK makes, the warm ones
// included, is a guest with a kernel of its own. A reduced run: the
// tier's guests boot on the host's system directories, not an image, so
// the template of an image (its create and builds) is left out, and so
// are snapshots and forks: a guest over the host's root is snapshot as
// its files, which a microVM does not start from (docs/microvm.md; a
// guest of an image is forked with its memory: TestServeMicroVMFork).
// Left out too, for the suite's time under emulation (microVMSuites):
// what the other tiers' runs test through the same daemon and agent code
// — terminals (a guest's: TestMicroVMTerminal), writes in place, files'
// metadata (which the guest's root cannot keep) and signed URLs, and the
// MCP gateway's start.
func TestE2BSDKMicroVM(t *testing.T) {
	t.Parallel()
	env := microVMEnv(t, t.TempDir())
	e2bSDKRun(t, "e2b", policy.TierMicroVM, []string{env[len(env)-1]},
		[]string{"HUTCH_E2B_SUITES=" + strings.Join(microVMSuites, ","),
			"HUTCH_E2B_REDUCED=the microvm tier: guests over the host's root, snapshots of files only, no templates of images; terminals, files in place, metadata and signed URLs are tested under the other tiers"},
		"--default-tier", "microvm", "--allow-emulation")
}

// microVMSuites are the suites of test/e2b/sdk.test.mjs that
// TestE2BSDKMicroVM runs.
var microVMSuites = []string{"control plane", "snapshots and forks", "templates", "template builds", "envd", "envd: commands",
	"envd: files", "envd: the sandbox ends under a command", "metrics and network"}

// e2bSDK runs E2B's SDK, the package sdk of test/e2b/node_modules,
// against a daemon started with the flags args, whose every sandbox must
// be of tier.
func e2bSDK(t *testing.T, sdk, tier string, args ...string) { e2bSDKWith(t, sdk, tier, nil, args...) }

// e2bSDKWith is e2bSDK with env added to the suite's environment.
func e2bSDKWith(t *testing.T, sdk, tier string, env []string, args ...string) {
	e2bSDKRun(t, sdk, tier, nil, env, args...)
}

// e2bSDKRun is e2bSDKWith with daemonEnv added to the daemon's
// environment. Under the microvm tier, whose guests boot on the host's
// system directories, the daemon has no template of an image.
func e2bSDKRun(t *testing.T, sdk, tier string, daemonEnv, env []string, args ...string) {
	node := needSDK(t, sdk)
	images := tier != policy.TierMicroVM
	// The suite's sandboxes live until its end, 1 GiB each (the default):
	// more of them than this host has GiB of memory.
	flags := []string{"--tenant-memory", "64g", "--metrics-interval", "1s", "--allow-private", "127.0.0.1/32"}
	var setup func(string)
	var warm string
	if images {
		img := imagetest.Busybox(t, func(ok bool, reason string) { testutil.Need(t, ok, reason) })
		setup = importImage(t, img, "hutch.test/e2b-sdk:1")
		flags = append(flags, "--warm", "2", "--template", "bb=hutch.test/e2b-sdk:1", "--warm", "bb=1")
		warm = `hutch_warm_sandboxes{template="bb"} 1`
		env = append([]string{"HUTCH_E2B_TEMPLATE=bb"}, env...)
	} else {
		// Booted guests of E2B's template base, which the SDK's creates
		// name, for them to take.
		flags = append(flags, "--warm", "base=2")
		warm = `hutch_warm_sandboxes{template="base"} 2`
	}
	d := startDaemonEnv(t, daemonEnv, setup, append(flags, args...)...)
	if !testutil.Eventually(3*time.Minute, func() bool { return strings.Contains(d.metrics(t), warm+"\n") }) {
		t.Fatalf("the warm pool did not fill: no %s in\n%s", warm, d.metrics(t))
	}
	r := d.admin(t, "token", "create", "--tenant", "e2b-sdk", "--e2b", "--state-dir", d.stateDir)
	token := lastLine(r.stdout)
	if r.code != 0 || !regexp.MustCompile(`^e2b_[0-9a-f]{40}$`).MatchString(token) {
		t.Fatalf("token create --e2b: want a token e2b_ + 40 hex digits:\n%s", r)
	}

	// A bound for a hung run only: the suite takes 2 to 5 minutes on a
	// busy 2-core machine, and grows.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "sdk.test.mjs")
	cmd.Dir = e2bDir
	cmd.Env = append(os.Environ(),
		"E2B_API_URL="+d.tcp, "E2B_SANDBOX_URL="+d.tcp, "E2B_API_KEY="+token, "HUTCH_E2B_TIER="+tier, "HUTCH_E2B_SDK="+sdk,
		"NO_COLOR=1", "HTTP_PROXY=", "HTTPS_PROXY=", "http_proxy=", "https_proxy=")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test sdk.test.mjs: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	m := d.metrics(t)
	if images {
		if !strings.Contains(m, `hutch_warm_creates_total{template="bb",result="hit"} 1`+"\n") {
			t.Errorf("the SDK's create of the template did not take the warm sandbox:\n%s", m)
		}
	} else if hits := regexp.MustCompile(`(?m)^hutch_warm_creates_total\{template="base",result="hit"\} (\d+)$`).FindStringSubmatch(m); hits == nil || hits[1] == "0" {
		// Under the microvm tier the creates of E2B's template base
		// take booted guests.
		t.Errorf("no create of the SDK took a warm guest of the template base:\n%s", m)
	}
	// Every sandbox was of the tier: the counts of the others are 0.
	for _, other := range policy.Tiers {
		line := regexp.MustCompile(`(?m)^hutch_sandboxes_created_total\{tier="` + other + `"\} (\d+)$`).FindStringSubmatch(m)
		switch {
		case line == nil:
			t.Errorf("no count of the sandboxes created of tier %s:\n%s", other, m)
		case other == tier && line[1] == "0", other != tier && line[1] != "0":
			t.Errorf("%s sandboxes of tier %s, the daemon's default being %s", line[1], other, tier)
		}
	}
}

// metrics is what the daemon's GET /metrics answers its operator.
func (d *daemonProc) metrics(t *testing.T) string {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.sock)
	}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://hutch/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v\n%s", resp.StatusCode, err, b)
	}
	return string(b)
}

// TestE2BSDKDomain runs the 'domain' tests of test/e2b/sdk.test.mjs: E2B's
// SDK with E2B_DOMAIN and E2B_API_KEY alone against hutch serve --domain
// over TLS, with a certificate for *.D of a CA made here
// (NODE_EXTRA_CA_CERTS) and a resolver that sends *.D to the daemon on
// loopback (test/e2b/resolve-domain.cjs, preloaded).
func TestE2BSDKDomain(t *testing.T) {
	t.Parallel()
	node := needSDK(t, "e2b")
	const domain = "e2b.hutch.test"
	certs := testutil.NewServerTLS(t, "*."+domain)
	dir := t.TempDir()
	files := map[string][]byte{"ca.pem": certs.CAPEM, "cert.pem": certs.CertPEM, "key.pem": certs.KeyPEM}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d := startDaemonWith(t, nil, "--domain", domain, "--tls-cert", filepath.Join(dir, "cert.pem"), "--tls-key", filepath.Join(dir, "key.pem"), "--volume-size", "64m")
	if !strings.HasPrefix(d.tcp, "https://") || !strings.Contains(d.log.String(), "E2B_DOMAIN="+domain) {
		t.Fatalf("hutch serve --domain --tls-cert: listening on %q:\n%s", d.tcp, d.log.String())
	}
	r := d.admin(t, "token", "create", "--tenant", "e2b-sdk", "--e2b", "--state-dir", d.stateDir)
	token := lastLine(r.stdout)
	if r.code != 0 {
		t.Fatalf("token create --e2b:\n%s", r)
	}
	preload, err := filepath.Abs(filepath.Join(e2bDir, "resolve-domain.cjs"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "sdk.test.mjs")
	cmd.Dir = e2bDir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "E2B_") && !strings.HasPrefix(kv, "NODE_") && !strings.HasPrefix(strings.ToUpper(kv), "HTTP") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "E2B_DOMAIN="+domain, "E2B_API_KEY="+token, "NO_COLOR=1",
		"NODE_OPTIONS=--require "+preload, "NODE_EXTRA_CA_CERTS="+filepath.Join(dir, "ca.pem"),
		"HUTCH_E2B_RESOLVE_DOMAIN="+domain, "HUTCH_E2B_RESOLVE_ADDR="+strings.TrimPrefix(d.tcp, "https://"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test sdk.test.mjs with E2B_DOMAIN: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`(?m)^ℹ pass [1-9]`).Match(out) || !regexp.MustCompile(`(?m)^ℹ fail 0$`).Match(out) {
		t.Fatalf("node --test sdk.test.mjs with E2B_DOMAIN ran no test, or failed:\n%s", out)
	}
	t.Logf("%s", out)
}

// TestE2BSDKBaseImage runs test/e2b/base.test.mjs, E2B's SDK against a
// daemon whose image store holds hutch's base image (the tarball
// scripts/base-image.sh built, named by $HUTCH_TEST_BASE_IMAGE, as
// scripts/test.sh sets it): E2B's template base is that image, with the
// user `user` and sudo served by the sandbox's agent.
func TestE2BSDKBaseImage(t *testing.T) {
	t.Parallel()
	e2bBaseImage(t, "namespace", nil)
}

// TestE2BSDKBaseImageGVisor is TestE2BSDKBaseImage under gVisor.
func TestE2BSDKBaseImageGVisor(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	e2bBaseImage(t, "gvisor", nil, "--default-tier", "gvisor", "--runsc", testutil.Runsc(t))
}

// TestE2BSDKBaseImageMicroVM is TestE2BSDKBaseImage under the microVM
// tier (emulated where there is no usable KVM): the guest boots on the
// image's EROFS root, and its pause goes to disk with its memory (the
// proxy's relay too: E2B's sandboxes have the network by default).
func TestE2BSDKBaseImageMicroVM(t *testing.T) {
	t.Parallel()
	env := microVMEnv(t, t.TempDir())
	e2bBaseImage(t, "microvm", env[len(env)-1:], "--default-tier", "microvm", "--allow-emulation")
}

func e2bBaseImage(t *testing.T, tier string, env []string, args ...string) {
	testutil.RequireRoot(t)
	node, why := nodeForE2B()
	testutil.Need(t, node != "", why)
	_, err := os.Stat(filepath.Join(e2bDir, "node_modules", "e2b", "package.json"))
	testutil.Need(t, err == nil, "E2B's SDK is not installed in test/e2b/node_modules (npm ci there; scripts/test.sh does)")
	tarball := testutil.BaseImage(t)
	d := startDaemonEnv(t, env, importTarball(t, tarball), args...)
	r := d.admin(t, "token", "create", "--tenant", "e2b-base", "--e2b", "--state-dir", d.stateDir)
	token := lastLine(r.stdout)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "base.test.mjs")
	cmd.Dir = e2bDir
	cmd.Env = append(os.Environ(), "E2B_API_URL="+d.tcp, "E2B_SANDBOX_URL="+d.tcp, "E2B_API_KEY="+token,
		"NO_COLOR=1", "HTTP_PROXY=", "HTTPS_PROXY=", "http_proxy=", "https_proxy=", "HUTCH_TIER="+tier)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test base.test.mjs (%s): %v\n%s\nhutch serve's log:\n%s", tier, err, out, d.log)
	}
	t.Logf("%s", out)
	// A tier that pauses to disk (gVisor, a microVM of an image) left
	// the sandbox's checkpoint on the way: the daemon says so.
	if tier != "namespace" && !strings.Contains(d.log.String(), "sandbox paused to disk") {
		t.Errorf("under tier %s the pause did not go to disk:\n%s", tier, d.log)
	}
}

// needSDK returns node for E2B's SDK, the package sdk of
// test/e2b/node_modules (testutil.E2BSDK).
func needSDK(t *testing.T, sdk string) string { return testutil.E2BSDK(t, e2bDir, sdk) }

// TestE2BSDKSecrets runs test/e2b/secrets.test.mjs, E2B's SDK's Secret
// against the daemon's secrets API, as two tenants; and a sandbox given a
// secret by a network rule's transform: an HTTPS server of the test on
// loopback (whose CA the daemon trusts, --upstream-ca) gets the real
// value in the header the rule sets, the sandbox sees none of it.
func TestE2BSDKSecrets(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	node, why := nodeForE2B()
	testutil.Need(t, node != "", why)
	_, err := os.Stat(filepath.Join(e2bDir, "node_modules", "e2b", "package.json"))
	testutil.Need(t, err == nil, "E2B's SDK is not installed in test/e2b/node_modules (npm ci there; scripts/test.sh does)")

	// The upstream: it answers the headers it got (the proxy redacts a
	// secret's value in what it answers), and keeps them for the test.
	var mu sync.Mutex
	var seen []http.Header
	up := testutil.NewServerTLS(t, "127.0.0.1")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		mu.Unlock()
		_ = json.NewEncoder(w).Encode(r.Header)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{up.Cert}}
	srv.StartTLS()
	defer srv.Close()
	caFile := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(caFile, up.CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}

	d := startDaemonWith(t, nil, "--upstream-ca", caFile, "--allow-private", "127.0.0.1/32")
	keys := map[string]string{}
	for _, tenant := range []string{"a", "b"} {
		r := d.admin(t, "token", "create", "--tenant", tenant, "--e2b", "--state-dir", d.stateDir)
		keys[tenant] = lastLine(r.stdout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "secrets.test.mjs")
	cmd.Dir = e2bDir
	cmd.Env = append(os.Environ(), "E2B_API_URL="+d.tcp, "E2B_SANDBOX_URL="+d.tcp, "E2B_API_KEY="+keys["a"], "HUTCH_E2B_OTHER_KEY="+keys["b"],
		"HUTCH_E2B_UPSTREAM="+strings.TrimPrefix(srv.URL, "https://"),
		"NO_COLOR=1", "HTTP_PROXY=", "HTTPS_PROXY=", "http_proxy=", "https_proxy=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test secrets.test.mjs: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	// The value is in no answer, and not in the daemon's log either.
	for _, v := range []string{"ghp_not-a-real-token", "sk-rule-real-value"} {
		if strings.Contains(d.log.String(), v) {
			t.Errorf("the daemon's log holds a secret's value (%s)", v)
		}
	}
	// What the upstream got, request by request (see secrets.test.mjs):
	// the rule's headers with the real value; after updateNetwork took
	// the rule away, neither.
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < 2 {
		t.Fatalf("the upstream got %d requests, want at least 2", len(seen))
	}
	for i, h := range seen[:len(seen)-1] {
		if got := h.Get("Authorization"); got != "Bearer sk-rule-real-value" {
			t.Errorf("request %d: Authorization %q, want the secret's real value", i, got)
		}
		if got := h.Get("X-Plain"); got != "a$b" {
			t.Errorf("request %d: X-Plain %q, want a$b", i, got)
		}
	}
	if last := seen[len(seen)-1]; last.Get("Authorization") != "" || last.Get("X-Plain") != "" {
		t.Errorf("after the rule was taken away: headers %v", last)
	}
}

// TestE2BSDKVolumes runs test/e2b/volumes.test.mjs, E2B's SDK's Volume
// against the daemon's volume API and content API (E2B_VOLUME_API_URL:
// the daemon), as two tenants, and a sandbox created with volumeMounts
// (which that suite skips, saying so, while the daemon refuses volumes);
// against a daemon of each tier (the subtests "namespace" and "gvisor",
// whose every sandbox is of that tier). It leaves no volume mounted: the
// daemon's volumes are unmounted with its directory at the end.
func TestE2BSDKVolumes(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	node, why := nodeForE2B()
	testutil.Need(t, node != "", why)
	_, err := os.Stat(filepath.Join(e2bDir, "node_modules", "e2b", "package.json"))
	testutil.Need(t, err == nil, "E2B's SDK is not installed in test/e2b/node_modules (npm ci there; scripts/test.sh does)")
	for _, tier := range []string{"namespace", "gvisor"} {
		t.Run(tier, func(t *testing.T) {
			t.Parallel()
			flags := []string{"--volume-size", "64m"}
			if tier == "gvisor" {
				flags = append(flags, "--default-tier", "gvisor", "--runsc", testutil.Runsc(t))
			}
			d := startDaemonWith(t, nil, flags...)
			keys := map[string]string{}
			for _, tenant := range []string{"a", "b"} {
				r := d.admin(t, "token", "create", "--tenant", tenant, "--e2b", "--state-dir", d.stateDir)
				keys[tenant] = lastLine(r.stdout)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "volumes.test.mjs")
			cmd.Dir = e2bDir
			cmd.Env = append(os.Environ(), "E2B_API_URL="+d.tcp, "E2B_SANDBOX_URL="+d.tcp, "E2B_VOLUME_API_URL="+d.tcp,
				"E2B_API_KEY="+keys["a"], "HUTCH_E2B_OTHER_KEY="+keys["b"],
				"NO_COLOR=1", "HTTP_PROXY=", "HTTPS_PROXY=", "http_proxy=", "https_proxy=")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("node --test volumes.test.mjs: %v\n%s", err, out)
			}
			t.Logf("%s", out)
		})
	}
}

// TestE2BCodeInterpreter runs test/e2b/interp.test.mjs: E2B's Code
// Interpreter SDK (@e2b/code-interpreter), unchanged, against hutch serve
// whose store holds hutch's code-interpreter image, which the daemon
// makes E2B's template code-interpreter-v1 by itself: Python and
// JavaScript, state, streams, a chart as PNG and data, a DataFrame,
// errors, env vars, contexts, an interrupt when the client gives up, and
// the envd access token on /execute.
// Its sandboxes have 1 GiB of memory: code that takes more loses its
// kernel, and the sandbox goes on. (A warm sandbox's kernels getting the
// create's environment is interp's TestServerSetEnv.)
func TestE2BCodeInterpreter(t *testing.T) {
	t.Parallel()
	e2bCodeInterpreter(t, "namespace", "--default-memory", "1g")
}

// TestE2BCodeInterpreterGVisor is TestE2BCodeInterpreter under gVisor,
// without a warm pool, and without the code contexts' test (a reduced
// run: their kernels start and restart as under the tier namespace).
func TestE2BCodeInterpreterGVisor(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	e2bCodeInterpreter(t, "gvisor", "--default-tier", "gvisor", "--runsc", testutil.Runsc(t))
}

func e2bCodeInterpreter(t *testing.T, tier string, args ...string) {
	node := needSDK(t, "@e2b/code-interpreter")
	tarball := testutil.CodeInterpreterImage(t)
	d := startDaemonWith(t, importTarball(t, tarball), args...)
	r := d.admin(t, "token", "create", "--tenant", "e2b-interp", "--e2b", "--state-dir", d.stateDir)
	token := lastLine(r.stdout)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-force-exit", "--test-reporter=spec", "interp.test.mjs")
	cmd.Dir = e2bDir
	cmd.Env = append(os.Environ(), "E2B_API_URL="+d.tcp, "E2B_SANDBOX_URL="+d.tcp, "E2B_API_KEY="+token,
		"NO_COLOR=1", "HTTP_PROXY=", "HTTPS_PROXY=", "http_proxy=", "https_proxy=")
	if tier == "namespace" {
		cmd.Env = append(cmd.Env, "HUTCH_TEST_OOM=1")
	} else {
		cmd.Env = append(cmd.Env, "HUTCH_E2B_REDUCED=the code contexts' kernels start and restart as under the tier namespace, whose run has them")
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test interp.test.mjs (%s): %v\n%s", tier, err, out)
	}
	t.Logf("%s", out)
}
