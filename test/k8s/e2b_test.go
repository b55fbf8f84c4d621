//go:build linux

package k8s

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/e2b"
	"github.com/hutch-sandbox/hutch/internal/kube"
	"github.com/hutch-sandbox/hutch/internal/testutil"
	"github.com/hutch-sandbox/hutch/internal/testutil/k8stest"
)

// e2bDir holds E2B's SDK suite, test/e2b/sdk.test.mjs, and its pinned
// dependencies.
var e2bDir = filepath.Join("..", "e2b")

// baseImageTar is the tarball of hutch's base image (`docker save`
// layout, tagged e2b.BaseImage): $HUTCH_TEST_BASE_IMAGE, else the newest
// scripts/base-image.sh left in its cache; "" when there is none.
func baseImageTar() string {
	if p := os.Getenv(testutil.BaseImageEnv); p != "" {
		return p
	}
	tars, _ := filepath.Glob("/var/cache/hutch/base-image/base-*.tar")
	newest, at := "", time.Time{}
	for _, p := range tars {
		if fi, err := os.Stat(p); err == nil && fi.ModTime().After(at) {
			newest, at = p, fi.ModTime()
		}
	}
	return newest
}

// TestServeKubernetesE2B runs E2B's JavaScript SDK, unchanged, against
// two replicas of hutch serve --kubernetes behind one address:
// test/e2b/sdk.test.mjs with node's test runner and
// HUTCH_E2B_KUBERNETES=1, E2B_API_URL and E2B_SANDBOX_URL a balancer that
// sends each request to the replicas in turn (harsher than a Service,
// which balances connections), E2B_API_KEY a token of `hutch token create
// --e2b` on a replica's socket. Each sandbox is a pod of hutch's base image (imported into the
// cluster's containerd, the daemon's --kubernetes-image): E2B's user, its
// shell and tools. What a pod cannot do the suite skips, saying why, or
// asserts the refusal naming Kubernetes (docs/kubernetes.md lists them).
func TestServeKubernetesE2B(t *testing.T) {
	t.Parallel() // beside TestServeKubernetes, each on a cluster of its own
	node := testutil.E2BSDK(t, e2bDir, "e2b")
	tar := baseImageTar()
	testutil.Need(t, tar != "", "no tarball of hutch's base image ($"+testutil.BaseImageEnv+", or scripts/base-image.sh's cache /var/cache/hutch/base-image)")
	c, _ := hutchCluster(t, nil)
	c.Import(t, tar)
	c.KubectlIn(t, runtimeClassYAMLHutch, "apply", "-f", "-")
	c.NodeOnBridge(t)
	kc := serviceAccount(t, c)
	r1, r2 := &replica{name: "e2b-1"}, &replica{name: "e2b-2"}
	for _, r := range []*replica{r1, r2} {
		// A warm pool of E2B's template on each: most creates of the
		// suite are claims, as on a cluster that serves many.
		startReplica(t, c, kc, "e2b", r, "--kubernetes-image", e2b.BaseImage, "--tenant-memory", "64g", "--warm", "base=2")
	}
	p, dir := r1.p, r1.dir
	api := roundRobin(t, r1.url, r2.url)

	tok := exec.Command(testutil.Hutch(t), "token", "create", "--tenant", "e2b-sdk", "--e2b")
	tok.Env = append(os.Environ(), "HUTCH_HOST=unix://"+p.sock, "HOME="+dir)
	out, err := tok.CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	token := lines[len(lines)-1]
	if err != nil || !regexp.MustCompile(`^e2b_[0-9a-f]{40}$`).MatchString(token) {
		t.Fatalf("hutch token create --e2b: %v, want a token e2b_ + 40 hex digits:\n%s", err, out)
	}

	// A bound for a hung run only.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "sdk.test.mjs")
	cmd.Dir = e2bDir
	cmd.Env = append(os.Environ(), "E2B_API_URL="+api, "E2B_SANDBOX_URL="+api, "E2B_API_KEY="+token, "HUTCH_E2B_KUBERNETES=1",
		"NO_COLOR=1", "HTTP_PROXY=", "HTTPS_PROXY=", "http_proxy=", "https_proxy=")
	out, err = cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test sdk.test.mjs: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	// Every pod left is a warm one, waiting to be claimed: the suite's own
	// are gone with their sandboxes.
	var left []string
	if !testutil.Eventually(2*time.Minute, func() bool { left = suitePods(t, c); return len(left) == 0 }) {
		t.Errorf("pods of the suite's sandboxes left after it: %v", left)
	}
	for _, r := range []*replica{r1, r2} {
		if n := strings.Count(r.p.log.String(), "msg=\"sandbox ended\""); n == 0 {
			t.Errorf("replica %s served no sandbox of the suite's", r.name)
		}
	}
}

// suitePods lists the pods of the sandboxes' namespace whose sandbox is
// not a warm one of a pool (its record, the ConfigMap of hutch serve's
// state, names the pools' tenant), or has no record.
func suitePods(t *testing.T, c *k8stest.Cluster) []string {
	t.Helper()
	var out []string
	for _, pod := range strings.Fields(c.Kubectl(t, "get", "pods", "-n", "hutch-sandboxes", "-l", kube.LabelManaged+"=hutch",
		"-o", `jsonpath={range .items[*]}{.metadata.labels.hutch\.dev/sandbox}{"\n"}{end}`)) {
		var rec struct{ Tenant string }
		r := c.Run(context.Background(), "", "get", "configmap", "-n", "hutch-sandboxes", "hutch-rec-"+pod, "-o", "jsonpath={.data.record}")
		if r.Err != nil || json.Unmarshal([]byte(r.Stdout), &rec) != nil || rec.Tenant != "@warm" {
			out = append(out, pod)
		}
	}
	return out
}

// roundRobin is the URL of a balancer on loopback that sends each request
// to the next of urls in turn, its host unchanged, streams as they come.
func roundRobin(t *testing.T, urls ...string) string {
	t.Helper()
	var next atomic.Uint64
	targets := make([]*url.URL, len(urls))
	for i, u := range urls {
		var err error
		if targets[i], err = url.Parse(u); err != nil {
			t.Fatal(err)
		}
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(targets[next.Add(1)%uint64(len(targets))])
			pr.Out.Host = pr.In.Host
		},
		FlushInterval: -1,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
