//go:build linux

package k8s

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/client"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/kube"
	"github.com/hutch-sandbox/hutch/internal/testutil"
	"github.com/hutch-sandbox/hutch/internal/testutil/k8stest"
)

// freePort is a TCP port of 127.0.0.1 free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// replica is one replica of hutch serve the test runs.
type replica struct {
	name, url, dir string
	p              *serveProc
}

// startReplica starts (or starts again) replica r of hutch serve name, as
// the manifest's service account (kubeconfig kc).
func startReplica(t *testing.T, c *k8stest.Cluster, kc, name string, r *replica, flags ...string) {
	t.Helper()
	if r.url == "" {
		r.url, r.dir = fmt.Sprintf("http://127.0.0.1:%d", freePort(t)), t.TempDir()
	}
	r.p = startServe(t, c, r.dir, append([]string{"--kubeconfig", kc, "--kubernetes-name", name,
		"--listen", strings.TrimPrefix(r.url, "http://"), "--kubernetes-replica", r.name, "--kubernetes-advertise", r.url,
		// Short for the test (a killed replica is taken over a Lease
		// later), long enough for an API server slow on a busy machine
		// (with 10 s, a live replica's Lease lapsed at a load of 40).
		"--kubernetes-lease", "20s",
		// Many sandboxes of 1g at once: more than this machine's memory,
		// the default quota of a tenant.
		"--tenant-memory", "64g"}, flags...)...)
}

// namePods lists the pods of hutch serve name in the sandboxes' namespace.
func namePods(t *testing.T, c *k8stest.Cluster, name string) []string {
	t.Helper()
	return strings.Fields(c.Kubectl(t, "get", "pods", "-n", "hutch-sandboxes", "-l", kube.LabelDaemon+"="+name, "-o", "jsonpath={.items[*].metadata.name}"))
}

// testServeReplicas: two replicas of one hutch serve (--kubernetes-replica)
// serve every sandbox whichever replica a request reaches: a sandbox is
// served by the replica that made it, and a request for it that reaches
// the other is sent on to it (commands, files, streams). A replica killed
// loses no sandbox: the other takes its sandboxes over once its Lease
// lapses, without a request for them, with their files and processes; a
// replica stopped (an upgrade) hands them over at once; a replica started
// again leaves the other's sandboxes alone. A hundred sandboxes go through
// the pair, 25 at a time, each driven through the replica that did not
// make it.
func testServeReplicas(t *testing.T, c *k8stest.Cluster, kc string) {
	const name = "rep"
	r1, r2 := &replica{name: "r1"}, &replica{name: "r2"}
	startReplica(t, c, kc, name, r1)
	startReplica(t, c, kc, name, r2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tok, err := r1.p.client(t).CreateToken(ctx, client.TokenOptions{Tenant: "replicas"})
	if err != nil {
		t.Fatal(err)
	}
	clientOf := func(r *replica) *client.Client {
		cl, err := client.New(r.url, tok)
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	c1, c2 := clientOf(r1), clientOf(r2)
	note := daemon.DefaultWorkspace + "/note.txt"

	// Made by r1, driven through r2; made by r2, driven through r1.
	a, err := c1.Create(ctx, client.CreateOptions{})
	if err != nil {
		t.Fatalf("create through r1: %v", err)
	}
	b, err := c2.Create(ctx, client.CreateOptions{})
	if err != nil {
		t.Fatalf("create through r2: %v", err)
	}
	for _, x := range []struct {
		cl *client.Client
		id string
	}{{c2, a.ID}, {c1, b.ID}} {
		if _, err := x.cl.WriteFile(ctx, x.id, note, strings.NewReader("written through the other replica\n"), 0o644); err != nil {
			t.Fatalf("write file in %s: %v", x.id, err)
		}
		var buf bytes.Buffer
		if _, err := x.cl.ReadFile(ctx, x.id, note, &buf); err != nil || buf.String() != "written through the other replica\n" {
			t.Errorf("read file in %s: %q %v", x.id, buf.String(), err)
		}
		r, err := x.cl.Run(ctx, x.id, client.Command{Args: []string{"sh", "-c", "echo out; echo err >&2; exit 4"}})
		if err != nil || r.ExitStatus.Code != 4 || string(r.Stdout) != "out\n" || string(r.Stderr) != "err\n" {
			t.Errorf("run in %s through the other replica: %+v %v", x.id, r, err)
		}
		if got, err := x.cl.Get(ctx, x.id); err != nil || got.State != "running" {
			t.Errorf("get %s through the other replica: %+v %v", x.id, got, err)
		}
	}
	if l, err := c2.List(ctx, client.ListOptions{}); err != nil || len(l) != 2 {
		t.Errorf("list through r2: %d sandboxes, %v; want 2", len(l), err)
	}

	// E2B's handle of a (its envd access token, from a connect through
	// r2, which r1 answers) is any replica's: it holds after r1's kill.
	e2bKey, err := r1.p.client(t).CreateToken(ctx, client.TokenOptions{Tenant: "replicas", E2B: true})
	if err != nil {
		t.Fatal(err)
	}
	envdToken := e2bConnect(t, r2.url, e2bKey, a.ID)
	if code := envdHealth(t, r2.url, a.ID, envdToken); code != http.StatusNoContent && code != http.StatusOK {
		t.Errorf("envd's health of a through r2 with its token: %d", code)
	}

	// r1 killed while a command of a's runs through r2: a's pod runs on;
	// r2 takes a over when r1's Lease lapses, with no request for it.
	// (Exec: its streams go over the connection the request upgraded.)
	proc, err := c2.Exec(ctx, a.ID, client.Command{Args: []string{"sh", "-c", "echo started; sleep 5; echo late > late.txt"}})
	if err != nil {
		t.Fatalf("exec in %s through r2: %v", a.ID, err)
	}
	if line, err := bufio.NewReader(proc.Stdout).ReadString('\n'); err != nil || line != "started\n" {
		t.Fatalf("exec in %s through r2: %q %v", a.ID, line, err)
	}
	r1.p.stop(syscall.SIGKILL)
	if !testutil.Eventually(2*time.Minute, func() bool {
		return strings.Contains(r2.p.log.String(), `msg="sandbox taken over from a replica gone" sandbox=`+a.ID)
	}) {
		t.Fatalf("r2 did not take %s over:\n%s", a.ID, r2.p.log.String())
	}
	if got := namePods(t, c, name); len(got) != 2 {
		t.Errorf("pods after r1's kill: %v, want a's and b's", got)
	}
	var r *client.Result
	if !testutil.Eventually(time.Minute, func() bool {
		r, err = c2.Run(ctx, a.ID, client.Command{Args: []string{"sh", "-c", "sleep 6; cat note.txt late.txt"}})
		return err == nil
	}) || string(r.Stdout) != "written through the other replica\nlate\n" {
		t.Errorf("a after r1's kill, through r2: %+v %v", r, err)
	}

	if code := envdHealth(t, r2.url, a.ID, envdToken); code != http.StatusNoContent && code != http.StatusOK {
		t.Errorf("envd's health of a through r2 with its token after r1's kill: %d", code)
	}
	if code := envdHealth(t, r2.url, a.ID, strings.Repeat("0", len(envdToken))); code != http.StatusUnauthorized {
		t.Errorf("envd's health of a with a wrong token: %d, want 401", code)
	}

	// r1 again, under its name: it leaves r2's sandboxes to r2, and
	// sends their requests to it.
	startReplica(t, c, kc, name, r1)
	if r, err := c1.Run(ctx, a.ID, client.Command{Args: []string{"cat", "note.txt"}}); err != nil || string(r.Stdout) != "written through the other replica\n" {
		t.Errorf("a through r1 started again: %+v %v", r, err)
	}
	if strings.Contains(r1.p.log.String(), "sandbox taken over") {
		t.Errorf("r1 started again took a sandbox of r2's:\n%s", r1.p.log.String())
	}

	// r2 stopped (an upgrade): its Lease goes with it, and r1 takes both
	// over at once.
	r2.p.stop(syscall.SIGTERM)
	for _, id := range []string{a.ID, b.ID} {
		if r, err := c1.Run(ctx, id, client.Command{Args: []string{"cat", "note.txt"}}); err != nil || string(r.Stdout) != "written through the other replica\n" {
			t.Errorf("%s through r1 after r2's stop: %+v %v", id, r, err)
		}
	}
	if n := strings.Count(r1.p.log.String(), `msg="sandbox taken over from a replica gone"`); n != 2 {
		t.Errorf("r1 says it took %d sandboxes over, want 2:\n%s", n, r1.p.log.String())
	}
	startReplica(t, c, kc, name, r2)
	for _, id := range []string{a.ID, b.ID} {
		if err := c2.Destroy(ctx, id); err != nil {
			t.Errorf("destroy %s through r2: %v", id, err)
		}
	}

	// Sandboxes through the pair, 25 at a time: each made through one
	// replica, run and destroyed through the other. A hundred with
	// HUTCH_TEST_K8S_SANDBOXES=100 (docs/kubernetes.md has the figures);
	// 40 by default, for the suite's time on two cores.
	n, at := 40, 25
	if v := os.Getenv("HUTCH_TEST_K8S_SANDBOXES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("HUTCH_TEST_K8S_SANDBOXES=%q: want a number of sandboxes", v)
		}
	}
	begin := time.Now()
	sem := make(chan struct{}, at)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed []string
	for i := range n {
		mk, other := c1, c2
		if i%2 == 1 {
			mk, other = c2, c1
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			fail := func(f string, a ...any) {
				mu.Lock()
				failed = append(failed, fmt.Sprintf(f, a...))
				mu.Unlock()
			}
			sb, err := mk.Create(ctx, client.CreateOptions{})
			if err != nil {
				fail("create %d: %v", i, err)
				return
			}
			r, err := other.Run(ctx, sb.ID, client.Command{Args: []string{"echo", fmt.Sprint(i)}})
			if err != nil || string(r.Stdout) != fmt.Sprintf("%d\n", i) {
				fail("run in sandbox %d (%s): %+v %v", i, sb.ID, r, err)
			}
			if err := other.Destroy(ctx, sb.ID); err != nil {
				fail("destroy sandbox %d (%s): %v", i, sb.ID, err)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d sandboxes through two replicas, %d at a time: %v", n, at, time.Since(begin).Round(time.Millisecond))
	for _, f := range failed {
		t.Error(f)
	}
	if !testutil.Eventually(2*time.Minute, func() bool { return len(namePods(t, c, name)) == 0 }) {
		t.Errorf("pods left: %v", namePods(t, c, name))
	}
}

// e2bConnect connects to sandbox id through E2B's API at base with API
// key key, and returns its envd access token.
func e2bConnect(t *testing.T, base, key, id string) string {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/v2/sandboxes/"+id+"/connect", strings.NewReader(`{"timeout":600}`))
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Token string `json:"envdAccessToken"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode/100 != 2 || out.Token == "" {
		t.Fatalf("E2B connect to %s: %d %v", id, resp.StatusCode, err)
	}
	return out.Token
}

// envdHealth is the status of envd's /health of sandbox id through base,
// with envd access token tok.
func envdHealth(t *testing.T, base, id, tok string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/health", nil)
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("X-Access-Token", tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
