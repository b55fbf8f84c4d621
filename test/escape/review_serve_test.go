//go:build linux

package escape

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/cgroups"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// Attacks on hutch serve from its tenants and from sandboxes (ESCAPES
// 25, 26, 28, 29, 30): a real `hutch serve` started by the built binary,
// driven over its TCP listener with tenants' tokens (hutch's API and E2B's)
// and, for the operator, over its unix socket.

// descendants lists the processes below pid.
func descendants(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err == nil && p != pid && descendantOf(p, pid) {
			out = append(out, p)
		}
	}
	return out
}

// descendantOf reports whether process p is below process root.
func descendantOf(p, root int) bool {
	for n := 0; p > 1 && n < 1000; n++ {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
		if err != nil {
			return false
		}
		i := bytes.LastIndexByte(b, ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			return false
		}
		p, _ = strconv.Atoi(f[1])
		if p == root {
			return true
		}
	}
	return false
}

// token makes a token for tenant in the daemon's store (shaped as an E2B
// API key: it serves both APIs).
func (s *served) token(t *testing.T, tenant string) string {
	t.Helper()
	out, err := exec.Command(testutil.Hutch(t), "token", "create", "--e2b", "--tenant", tenant, "--state-dir", s.stateDir).CombinedOutput()
	if err != nil {
		t.Fatalf("token create: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// do sends a request over TCP with the token (hutch's API: Bearer; E2B's
// paths: X-API-Key), or over the unix socket as the operator when token
// is "". It returns the status and the body.
func (s *served) do(t *testing.T, token, method, path, body string) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: 120 * time.Second}
	base := s.url
	if token == "" {
		client.Transport = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", s.sock)
		}}
		base = "http://hutch"
	} else if s.roots != nil {
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.roots}}
	}
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("X-API-Key", token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// create makes a sandbox with body (hutch's CreateBody) and returns its id.
func (s *served) create(t *testing.T, token, body string) string {
	t.Helper()
	status, out := s.do(t, token, "POST", "/v1/sandboxes", body)
	if status != http.StatusCreated {
		t.Fatalf("create %s: %d %s", body, status, out)
	}
	var info struct{ ID string }
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatal(err)
	}
	return info.ID
}

// runIn runs script with sh in sandbox id and returns its outputs and exit
// code; ok is false when the sandbox's agent is gone (the sandbox ended).
func (s *served) runIn(t *testing.T, token, id, script string) (stdout, stderr string, code int, ok bool) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"args": []string{"sh", "-c", script}})
	status, out := s.do(t, token, "POST", "/v1/sandboxes/"+id+"/exec", string(b))
	if status == http.StatusConflict || status == http.StatusNotFound {
		return "", out, -1, false
	}
	if status != http.StatusOK {
		t.Fatalf("exec in %s: %d %s", id, status, out)
	}
	var r struct {
		Stdout, Stderr string
		ExitCode       int `json:"exit_code"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	return r.Stdout, r.Stderr, r.ExitCode, true
}

// refused checks a 400 whose message names every one of want.
func refused(t *testing.T, what string, status int, body string, want ...string) {
	t.Helper()
	if status != http.StatusBadRequest {
		t.Errorf("%s: %d %s, want 400", what, status, body)
		return
	}
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("%s: %s does not name %q", what, body, w)
		}
	}
}

// hostAddress is an address of this host other than loopback, or "".
func hostAddress() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

// TestItem26_TenantNetworkRules (S6): a tenant's network rules never open
// loopback, private, link-local, metadata or this host's addresses, in any
// spelling and any rule kind, through hutch's API or E2B's: such rules are
// refused with 400 naming the field, and the proxy of a tenant's sandbox
// that may reach "every host" on the upstream's port still refuses a
// host-only server on the daemon's loopback, over HTTP and SOCKS5. The
// control: a daemon whose operator opened 127.0.0.1 (--allow-private)
// lets the same sandbox reach it, as does the operator's own rule on the
// unix socket — so the test sees an attack that succeeds.
func TestItem26_TenantNetworkRules(t *testing.T) {
	forEachServedTier(t, func(t *testing.T, tier []string) {
		web := startWeb(t, "127.0.0.1:0", nil)
		echo := startEcho(t, "127.0.0.1:0")
		d := startServed(t, "", true, tier...)
		tok := d.token(t, "tenant-a")
		port, echoPort := web.port, echo.port

		// The rules are refused, naming their field.
		hostIP := hostAddress()
		for _, tc := range []struct {
			policy, field string
		}{
			{`{"network":{"allowed_domains":["127.0.0.1:` + port + `"]}}`, "network.allowed_domains[0]"},
			{`{"network":{"allowed_domains":["example.com","[::ffff:127.0.0.1]:` + port + `"]}}`, "network.allowed_domains[1]"},
			{`{"network":{"allowed_domains":["[64:ff9b::7f00:1]:` + port + `"]}}`, "network.allowed_domains[0]"},
			{`{"network":{"allowed_domains":["[2002:7f00:1::1]:` + port + `"]}}`, "network.allowed_domains[0]"},
			{`{"network":{"allowed_domains":["localhost:` + port + `"]}}`, "network.allowed_domains[0]"},
			{`{"network":{"allowed_domains":["169.254.169.254"]}}`, "network.allowed_domains[0]"},
			{`{"network":{"allowed_cidrs":["127.0.0.0/8:` + port + `"]}}`, "network.allowed_cidrs[0]"},
			{`{"network":{"allowed_cidrs":["169.254.0.0/16"]}}`, "network.allowed_cidrs[0]"},
			{`{"network":{"allowed_cidrs":["10.0.0.0/8"]}}`, "network.allowed_cidrs[0]"},
			{`{"network":{"allowed_cidrs":["100.64.0.0/10"]}}`, "network.allowed_cidrs[0]"},
			{`{"network":{"allowed_domains":["up.test:` + port + `"],"hosts":["up.test:127.0.0.1"]}}`, "network.hosts[0]"},
			{`{"network":{"allowed_domains":["*:` + port + `"],"allow_private":["127.0.0.1/32"]}}`, "network.allow_private"},
			{`{"policy":{"secrets":[{"name":"T","hosts":["127.0.0.1:` + port + `"]}]},"secrets":{"T":"x"}}`, "secrets[0].hosts[0]"},
		} {
			body := `{"policy":` + tc.policy + `}`
			if strings.HasPrefix(tc.policy, `{"policy"`) {
				body = tc.policy
			}
			status, out := d.do(t, tok, "POST", "/v1/sandboxes", body)
			if tc.field == "network.allow_private" {
				// Refused by hutch's API before the daemon sees it.
				if status != http.StatusForbidden || !strings.Contains(out, "allow_private") {
					t.Errorf("%s: %d %s, want 403 naming allow_private", body, status, out)
				}
				continue
			}
			refused(t, body, status, out, tc.field, "only the daemon's operator")
		}
		if hostIP != "" {
			status, out := d.do(t, tok, "POST", "/v1/sandboxes", `{"policy":{"network":{"allowed_domains":["`+hostIP+`:`+port+`"]}}}`)
			refused(t, "the host's own address", status, out, "network.allowed_domains[0]", "this host")
		}
		for _, allow := range []string{"127.0.0.1", "[::1]:" + port, "169.254.169.254", "127.0.0.0/8", "fd00::/8"} {
			status, out := d.do(t, tok, "POST", "/sandboxes", `{"templateID":"base","network":{"allowOut":["`+allow+`"]}}`)
			refused(t, "E2B allowOut "+allow, status, out, "network.allowOut[0]", "only the daemon's operator")
		}

		// A tenant's sandbox that may reach every host on the upstreams'
		// ports: the proxy's guard still refuses the daemon's loopback.
		open := `{"policy":{"network":{"allowed_domains":["*:` + port + `","*:` + echoPort + `","*:80"]}}}`
		probe := func(d *served, token, id string) string {
			script := fmt.Sprintf(`for u in http://127.0.0.1:%[1]s/a http://[::ffff:127.0.0.1]:%[1]s/b http://localhost:%[1]s/c http://[64:ff9b::7f00:1]:%[1]s/d http://169.254.169.254/e; do
  c=$(curl -sS -o /dev/null -D /tmp/h --noproxy '' --proxy http://127.0.0.1:3128 --max-time 20 -w '%%{http_code}' "$u" 2>/dev/null)
  echo "$u $c $(grep -i '^x-hutch-blocked' /tmp/h | tr -d '\r')"
done
curl -sS -o /dev/null --max-time 20 --socks5-hostname 127.0.0.1:1080 http://127.0.0.1:%[2]s/socks 2>&1; echo "socks rc=$?"`, port, echoPort)
			out, errOut, _, ok := d.runIn(t, token, id, script)
			if !ok {
				t.Fatalf("the sandbox ended: %s", errOut)
			}
			return out + errOut
		}
		id := d.create(t, tok, open)
		out := probe(d, tok, id)
		if n := strings.Count(out, " 403 "); n != 5 || !strings.Contains(strings.ToLower(out), "is loopback") || !strings.Contains(strings.ToLower(out), "metadata") {
			t.Errorf("the tenant's sandbox was not refused everywhere (%d refusals):\n%s", n, out)
		}
		if got := web.received(); len(got) != 0 {
			t.Errorf("the host-only server got requests from a tenant's sandbox: %q", got)
		}
		if got := echo.received(); len(got) != 0 {
			t.Errorf("the host-only echo got a connection from a tenant's sandbox: %q", got)
		}

		// The operator, on the unix socket, may open 127.0.0.1.
		opID := d.create(t, "", `{"policy":{"network":{"allowed_domains":["127.0.0.1:`+port+`"]}}}`)
		if out, _, code, _ := d.runIn(t, "", opID, `curl -sS --noproxy '' --proxy http://127.0.0.1:3128 --max-time 20 http://127.0.0.1:`+port+`/operator`); code != 0 || !strings.Contains(out, "upstream /operator") {
			t.Errorf("the operator's rule did not open 127.0.0.1: %d %s", code, out)
		}

		// Control: a daemon whose operator opened 127.0.0.1 for every
		// sandbox; the tenant's same sandbox reaches the host-only server.
		d2 := startServed(t, "", true, append(slices.Clone(tier), "--allow-private", "127.0.0.1/32")...)
		tok2 := d2.token(t, "tenant-a")
		id2 := d2.create(t, tok2, open)
		if out := probe(d2, tok2, id2); !strings.Contains(out, "/a 200 ") {
			t.Errorf("control: with --allow-private the sandbox did not reach the server:\n%s", out)
		}
		if got := web.received(); len(got) == 0 {
			t.Error("control: the host-only server saw nothing")
		}
	})
}

// memoryPeak is the most memory the cgroup of served sandbox id ever
// held, and its limit: the daemon, a child of this test that stays in
// its cgroup, makes its sandboxes' groups right below it.
func memoryPeak(t *testing.T, id string) (peak, limit int64) {
	t.Helper()
	info, err := cgroups.Available()
	if err != nil {
		t.Fatal(err)
	}
	c, ok := info.Controllers["memory"]
	if !ok {
		t.Fatal("no memory controller")
	}
	dir := filepath.Join(c.Path, "hutch-"+id)
	read := func(name string) int64 {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatalf("%s: %q", name, b)
		}
		return v
	}
	if c.Version == 2 {
		return read("memory.peak"), read("memory.max")
	}
	return read("memory.max_usage_in_bytes"), read("memory.limit_in_bytes")
}

// TestItem28_TenantMemory (S7, ESCAPES 11): everything a tenant's
// sandbox writes into memory — /tmp, /dev/shm, its writable root — counts
// against its memory limit, which every served sandbox has by default:
// writing 3 × 64 MiB under a 96 MiB default leaves at most 96 MiB written
// (the writer is OOM-killed — commands start with a higher OOM score than
// the agent, the sandbox's PID 1 — and the sandbox goes on), and the sandbox's
// cgroup never held more. Sizes beyond the daemon's maxima are refused
// with 400 naming the field. The control: the same writes under a larger
// limit all succeed (what the host held before every sandbox had a
// limit).
func TestItem28_TenantMemory(t *testing.T) {
	forEachServedTier(t, func(t *testing.T, tier []string) {
		d := startServed(t, "", true, append(slices.Clone(tier), "--default-memory", "96m", "--max-tmp-size", "128m", "--max-memory", "1g")...)
		tok := d.token(t, "tenant-a")
		for policy, field := range map[string]string{
			`{"resources":{"tmp_size":"100t"}}`: "resources.tmp_size",
			`{"resources":{"memory":"100t"}}`:   "resources.memory",
			`{"resources":{"disk":"100t"}}`:     "resources.disk",
		} {
			status, out := d.do(t, tok, "POST", "/v1/sandboxes", `{"policy":`+policy+`}`)
			refused(t, policy, status, out, field, "above the maximum")
		}

		// No help from the writer: at the limit the OOM killer must take it,
		// not the agent (the sandbox's PID 1, whose end would end the sandbox).
		write := `for f in /tmp/a /dev/shm/b /root/c; do dd if=/dev/zero of=$f bs=1M count=64 2>/dev/null; done; true`
		sum := func(id, token string) int64 {
			out, errOut, code, ok := d.runIn(t, token, id, `t=0; for f in /tmp/a /dev/shm/b /root/c; do [ -e $f ] && t=$((t + $(stat -c '%b' $f) * $(stat -c '%B' $f))); done; echo $t`)
			if !ok || code != 0 {
				t.Fatalf("sizes in %s: %d %s %s", id, code, out, errOut)
			}
			n, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
			if err != nil {
				t.Fatalf("sizes %q", out)
			}
			return n
		}

		id := d.create(t, tok, `{}`)
		// The agent raises its own score while it forks a command (which so
		// starts with it) and lowers it again once the command runs: read its
		// score once that is done.
		if out, _, _, _ := d.runIn(t, tok, id, `for i in $(seq 100); do a=$(cat /proc/1/oom_score_adj); [ "$a" = 0 ] && break; sleep 0.1; done; echo $a $(cat /proc/self/oom_score_adj)`); strings.TrimSpace(out) != "0 500" {
			t.Errorf("OOM score adjustments of the agent and a command: %q, want 0 and 500", out)
		}
		const limit = 96 << 20
		if underGVisor(tier) {
			// gVisor's Sentry is one host process with no OOM killer of its
			// own: at the limit the host's takes the Sentry, and the whole
			// sandbox ends (ARCHITECTURE, The gVisor tier). The bound is the
			// same: the cgroup around the Sentry and its gofer has the limit.
			if _, lim := memoryPeak(t, id); lim != limit {
				t.Errorf("the gVisor sandbox's cgroup has a limit of %d, want %d", lim, limit)
			}
			if _, _, _, ok := d.runIn(t, tok, id, write); ok {
				if n := sum(id, tok); n > limit {
					t.Errorf("the sandbox holds %d bytes in /tmp, /dev/shm and its root, want at most the limit %d", n, limit)
				}
			}
		} else {
			if _, errOut, _, ok := d.runIn(t, tok, id, write); !ok {
				t.Fatalf("the sandbox ended while writing (its agent was killed): %s", errOut)
			}
			if n := sum(id, tok); n > limit || n < 32<<20 {
				t.Errorf("the sandbox holds %d bytes in /tmp, /dev/shm and its root, want at most the limit %d (and some)", n, limit)
			}
			if peak, lim := memoryPeak(t, id); lim != limit || peak > limit {
				t.Errorf("the sandbox's cgroup held at most %d bytes under a limit of %d, want at most %d", peak, lim, limit)
			}
		}

		// Control: under a larger limit the same writes all land.
		big := d.create(t, tok, `{"policy":{"resources":{"memory":"512m"}}}`)
		d.runIn(t, tok, big, write)
		if n := sum(big, tok); n < 3*64<<20 {
			t.Errorf("control: %d bytes written under a 512m limit, want all of 192 MiB", n)
		}
	})
}

// TestItem29_SecretReflected (S3): a secret's upstream that reflects the
// real value — in a header name and value, in an interim 103 response, in
// trailers announced or not, in the body — over HTTP/1.1 and HTTP/2:
// everything the tenant's sandbox sees (curl -v, headers, body and
// trailers) holds the placeholder, never the real value in any case. The
// control: the upstream did get the real value, and reflects it (its
// record), so a failure of redaction would show.
func TestItem29_SecretReflected(t *testing.T) {
	forEachServedTier(t, func(t *testing.T, tier []string) {
		dir := hostDir(t, 0, "reflect")
		caFile := filepath.Join(dir, "ca.pem")
		cfg := testCA(t, caFile, 0, "reflect", "reflect.test")
		cfg.NextProtos = []string{"h2", "http/1.1"}
		var got atomic.Value
		srv := &http.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				real := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
				got.Store(real)
				h := w.Header()
				h.Set("X-Hint-"+real, real)
				w.WriteHeader(http.StatusEarlyHints)
				clear(h)
				h.Set("X-Name-"+real, "name")
				h.Set("X-Value", "value "+real)
				h.Set("Trailer", "X-Trailer-"+real)
				w.WriteHeader(http.StatusOK)
				fmt.Fprintf(w, "body %s\n", real)
				_ = http.NewResponseController(w).Flush()
				h.Set("X-Trailer-"+real, "trailer "+real)
				h.Set(http.TrailerPrefix+"X-Late-"+real, "late "+real)
			}),
			TLSConfig: cfg,
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = srv.ServeTLS(l, "", "") }()
		t.Cleanup(func() { srv.Close() })
		_, port, _ := net.SplitHostPort(l.Addr().String())

		// The operator opens the host's loopback (where the test's upstream
		// is) and trusts its CA; the tenant pins the name there.
		d := startServed(t, "", true, append(slices.Clone(tier), "--allow-private", "127.0.0.1/32", "--upstream-ca", caFile)...)
		tok := d.token(t, "tenant-a")
		real := "Reflected" + randomName("SecretValue")
		body := `{"policy":{"network":{"hosts":["reflect.test:127.0.0.1"]},"secrets":[{"name":"TOKEN","hosts":["reflect.test:` + port + `"]}]},"secrets":{"TOKEN":"` + real + `"}}`
		id := d.create(t, tok, body)
		for _, proto := range []string{"--http1.1", "--http2"} {
			out, errOut, code, ok := d.runIn(t, tok, id, `echo "placeholder=$TOKEN"; curl -sS -v --raw `+proto+` --max-time 20 -H "Authorization: Bearer $TOKEN" https://reflect.test:`+port+`/`)
			if !ok || code != 0 {
				t.Fatalf("%s: curl: %d %s %s", proto, code, out, errOut)
			}
			all := out + errOut
			ph := regexp.MustCompile(`placeholder=(\S+)`).FindStringSubmatch(out)
			if ph == nil {
				t.Fatalf("no placeholder: %s", out)
			}
			lower := strings.ToLower(all)
			if strings.Contains(lower, strings.ToLower(real)) {
				t.Errorf("%s: the sandbox saw the real value:\n%s", proto, all)
			}
			want := []string{"x-name-" + ph[1], "value " + ph[1], "x-hint-" + ph[1]}
			if proto == "--http1.1" {
				// --raw shows the chunks, and the trailer after them.
				want = append(want, "x-trailer-"+ph[1], "trailer "+ph[1], "x-late-"+ph[1])
			}
			for _, want := range want {
				if !strings.Contains(lower, strings.ToLower(want)) {
					t.Errorf("%s: the sandbox did not see %q:\n%s", proto, want, all)
				}
			}
			if g, _ := got.Load().(string); g != real {
				t.Errorf("control: the upstream got %q, not the real value to reflect", g)
			}
		}
	})
}

// TestItem30_AuditAndOracles: state changes on every front end leave an
// audit record (E2B's refresh and connect, which did not); a tenant's
// workspace answers the same whether the host has a file where the view
// hides it or nothing at all, and the sandbox sees the same; and a
// tenant's /metrics shows no other tenant's activity. The host's files
// are unchanged.
func TestItem30_AuditAndOracles(t *testing.T) {
	forEachServedTier(t, func(t *testing.T, tier []string) {
		d := startServed(t, "", true, append(slices.Clone(tier), "--tenant-memory", "32g")...)
		alice, bob := d.token(t, "alice"), d.token(t, "bob")

		// Audit: E2B's refresh and connect.
		status, out := d.do(t, alice, "POST", "/sandboxes", `{"templateID":"base","allow_internet_access":false}`)
		if status != http.StatusCreated {
			t.Fatalf("E2B create: %d %s", status, out)
		}
		var sb struct{ SandboxID string }
		_ = json.Unmarshal([]byte(out), &sb)
		for _, c := range []struct{ path, body, action string }{
			{"/sandboxes/" + sb.SandboxID + "/refreshes", `{"duration":900}`, "extend"},
			{"/v2/sandboxes/" + sb.SandboxID + "/connect", `{"timeout":1200}`, "connect"},
		} {
			if status, out := d.do(t, alice, "POST", c.path, c.body); status/100 != 2 {
				t.Fatalf("%s: %d %s", c.path, status, out)
			}
			if !testutil.Eventually(time.Minute, func() bool { return audited(t, d, sb.SandboxID, c.action) }) {
				t.Errorf("%s left no %q record in the audit log", c.path, c.action)
			}
		}

		// Oracles: a file where the view hides the host (a directory only
		// root may enter, and /root), and nothing at all.
		closed, err := os.MkdirTemp("/var/lib", "hutch-escape-closed-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(closed) })
		writeFile(t, filepath.Join(closed, "file"), "host secret\n", 0o600, 0)
		if err := os.Chmod(closed, 0o700); err != nil {
			t.Fatal(err)
		}
		rootFile, err := os.CreateTemp("/root", "hutch-escape-")
		if err != nil {
			t.Fatal(err)
		}
		rootFile.Close()
		t.Cleanup(func() { os.Remove(rootFile.Name()) })
		// The closed-path scan runs at start and at most every few minutes:
		// a daemon started now knows the new directory.
		d2 := startServed(t, "", true, tier...)
		carol := d2.token(t, "carol")
		before := snapshot(t, closed)
		answer := func(ws string) string {
			status, out := d2.do(t, carol, "POST", "/v1/sandboxes", `{"policy":{"filesystem":{"workspace":"`+ws+`"}}}`)
			if status != http.StatusCreated {
				return fmt.Sprintf("%d %s", status, out)
			}
			var info struct{ ID string }
			_ = json.Unmarshal([]byte(out), &info)
			o, e, code, _ := d2.runIn(t, carol, info.ID, `stat -c '%a %u:%g' "$(dirname "$PWD")" "$PWD"; ls -a "$(dirname "$PWD")" | sed "s|^$(basename "$PWD")\$|WS|" | tr '\n' ' '`)
			_, _ = d2.do(t, carol, "DELETE", "/v1/sandboxes/"+info.ID, "")
			return fmt.Sprintf("201 %d %s %s", code, o, e)
		}
		for _, pair := range [][2]string{
			{filepath.Join(closed, "file", "ws"), filepath.Join(closed, "missing", "ws")},
			{filepath.Join(closed, "file"), filepath.Join(closed, "missing")},
			{rootFile.Name() + "/ws", rootFile.Name() + "-missing/ws"},
			{rootFile.Name(), rootFile.Name() + "-missing"},
		} {
			a, b := answer(pair[0]), answer(pair[1])
			if a != b {
				t.Errorf("workspaces %s and %s answer differently:\n%s\n%s", pair[0], pair[1], a, b)
			}
			if !strings.HasPrefix(a, "201 0 ") {
				t.Errorf("workspace %s: %s", pair[0], a)
			}
		}
		// A path the view shows as a file is refused, naming it: the sandbox
		// can see that much anyway.
		status, out = d2.do(t, carol, "POST", "/v1/sandboxes", `{"policy":{"filesystem":{"workspace":"/etc/hostname/ws"}}}`)
		refused(t, "a workspace below a visible file", status, out, "filesystem.workspace", "/etc/hostname")
		sameTree(t, closed, before)

		// Metrics: bob sees none of alice's sandboxes or requests.
		_, metrics := d.do(t, bob, "GET", "/metrics", "")
		for _, line := range strings.Split(metrics, "\n") {
			if strings.HasPrefix(line, "hutch_sandboxes{") && !strings.HasSuffix(line, " 0") {
				t.Errorf("bob's metrics count sandboxes he does not have: %s", line)
			}
			if strings.Contains(line, "POST /v1/sandboxes") || strings.HasPrefix(line, "hutch_egress_") {
				t.Errorf("bob's metrics show what is not his: %s", line)
			}
		}
		_, aliceMetrics := d.do(t, alice, "GET", "/metrics", "")
		tierName := policy.TierNamespace
		if underGVisor(tier) {
			tierName = policy.TierGVisor
		}
		if !strings.Contains(aliceMetrics, `hutch_sandboxes{state="running",tier="`+tierName+`"} 1`) {
			t.Errorf("alice's metrics do not count her sandbox:\n%s", aliceMetrics)
		}
	})
}

// audited reports whether the daemon's audit log has a record of action
// on sandbox id.
func audited(t *testing.T, d *served, id, action string) bool {
	b, err := os.ReadFile(filepath.Join(d.stateDir, audit.FileName))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		var e audit.Entry
		if json.Unmarshal([]byte(line), &e) == nil && e.Sandbox == id && e.Action == action {
			return true
		}
	}
	return false
}

// TestItem25_ServeRefusesSandboxPeers (S1; the daemon's side of escape
// item 25): a hutch run sandbox that can reach hutch serve's unix socket —
// here one open to everyone, in a directory the sandbox sees — is refused
// by the daemon itself: 403 with a code and a message, logged, and no
// sandbox made. The control: a host process with the very uid the
// sandbox runs as (root's sandboxes: 1000000000; the user's: its own), in
// the daemon's user namespace, is served — permissions alone would have
// let the sandbox in.
func TestItem25_ServeRefusesSandboxPeers(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		curl, err := exec.LookPath("curl")
		testutil.Need(t, err == nil, "needs curl")
		dir := hostDir(t, 0, "socket")
		d := startServed(t, dir, false)
		if err := os.Chmod(d.sock, 0o666); err != nil {
			t.Fatal(err)
		}
		req := []string{"-sS", "--max-time", "30", "--unix-socket", d.sock, "-X", "POST", "-d", "{}", "-w", "\ncode=%{http_code}\n", "http://hutch/v1/sandboxes"}

		// Control: the sandbox's host uid, from the host.
		uid := sb.mode.uid
		if uid == 0 {
			uid = 1000000000
		}
		ctl := exec.Command(curl, "-sS", "--max-time", "30", "--unix-socket", d.sock, "-w", "\ncode=%{http_code}\n", "http://hutch/v1/sandboxes")
		ctl.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
		if out, err := ctl.CombinedOutput(); err != nil || !strings.Contains(string(out), "code=200") {
			t.Fatalf("control: uid %d on the host could not use the socket: %v\n%s", uid, err, out)
		}

		// The attack, from inside a hutch run sandbox.
		args := append([]string{"run", "--"}, append([]string{curl}, req...)...)
		r := sb.hutch(opts{}, args...)
		if sb.gvisor() {
			// gVisor's kernel connects to no host unix socket (runsc
			// runs without --host-uds): the connection never reaches the
			// daemon, which is what must hold.
			if !strings.Contains(r.stdout, "code=000") || strings.Contains(d.logText(), "refused a connection") {
				t.Errorf("a gVisor sandbox reached hutch serve's socket:\n%s\n%s", r, d.logText())
			}
		} else {
			if !strings.Contains(r.stdout, "code=403") || !strings.Contains(r.stdout, `"permission_denied"`) || !strings.Contains(r.stdout, "user namespace") {
				t.Errorf("a hutch run sandbox used hutch serve's socket:\n%s", r)
			}
			if !strings.Contains(d.logText(), "refused a connection on the unix socket") {
				t.Errorf("the refusal is not in the daemon's log:\n%s", d.logText())
			}
		}
		// Nothing was made, nothing audited.
		status, out := d.do(t, "", "GET", "/v1/sandboxes", "")
		if status != http.StatusOK || strings.TrimSpace(out) != "[]" {
			t.Errorf("the daemon has sandboxes: %d %s", status, out)
		}
		if b, err := os.ReadFile(filepath.Join(d.stateDir, audit.FileName)); err == nil && len(bytes.TrimSpace(b)) != 0 {
			t.Errorf("the audit log has records:\n%s", b)
		}
	})
}
