package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestPolicyShowNetwork: the network flags land in the effective policy;
// allowing anything makes the mode "proxy" unless a mode is given.
func TestPolicyShowNetwork(t *testing.T) {
	t.Parallel()
	d := newPolicyDirs(t)
	r := d.show(t, "--allow-domain", "Example.COM", "--allow-domain", "*.npmjs.org:443", "--deny-domain", "evil.test",
		"--allow-cidr", "10.1.0.0/16:5432", "--allow-private", "127.0.0.1/32", "--add-host", "api.test:127.0.0.1")
	wantOK(t, r)
	p := parsePolicy(t, r.stdout)
	eq(t, "mode", p.Network.Mode, "proxy")
	eq(t, "allowed_domains", p.Network.AllowedDomains, []string{"example.com", "*.npmjs.org:443"})
	eq(t, "denied_domains", p.Network.DeniedDomains, []string{"evil.test"})
	eq(t, "allowed_cidrs", p.Network.AllowedCIDRs, []string{"10.1.0.0/16:5432"})
	eq(t, "allow_private", p.Network.AllowPrivate, []string{"127.0.0.1/32"})
	eq(t, "hosts", p.Network.Hosts, []string{"api.test:127.0.0.1"})

	r = d.show(t, "--net", "none", "--allow-domain", "example.com")
	wantOK(t, r)
	eq(t, "explicit mode", parsePolicy(t, r.stdout).Network.Mode, "none")
}

// TestNetworkFlagErrors: bad network flags are refused before anything
// runs, naming the flag's field and the problem.
func TestNetworkFlagErrors(t *testing.T) {
	t.Parallel()
	d := newPolicyDirs(t)
	pol := filepath.Join(d.ws, "policy.yaml")
	writeFile(t, pol, "network:\n  allow_host: false\n", 0o644)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--net", "wifi"}, `network.mode: unknown mode "wifi" (allowed: "none", "proxy", "host")`},
		{[]string{"--allow-domain", "https://x.test"}, `network.allowed_domains[0]: invalid domain "https://x.test": give a host name, not a URL`},
		{[]string{"--allow-cidr", "10.0.0.1/8"}, `network.allowed_cidrs[0]: invalid CIDR "10.0.0.1/8": 10.0.0.1/8 has bits set after the prefix (did you mean 10.0.0.0/8?)`},
		{[]string{"--allow-private", "localhost"}, `network.allow_private[0]: invalid CIDR "localhost"`},
		{[]string{"--add-host", "api.test"}, `network.hosts[0]: invalid host pin "api.test": want NAME:ADDRESS`},
		{[]string{"--policy", pol, "--net", "host"}, `network.mode: "host" is refused: the policy says network.allow_host: false`},
	} {
		r := d.show(t, tt.args...)
		if r.code != 125 || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("policy show %q: want exit 125 and %q, got %s", tt.args, tt.want, r)
		}
	}
}

// upstream is a loopback HTTP server that records the requests it got.
type upstream struct {
	addr string
	mu   sync.Mutex
	got  []string
}

func startUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.addr = l.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.got = append(u.got, r.Host+r.URL.Path)
		u.mu.Unlock()
		fmt.Fprintf(w, "hello from %s%s\n", r.Host, r.URL.Path)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return u
}

func (u *upstream) requests() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.got)
}

// startSSHListener listens on the loopback for one connection and passes
// on the first line it got (an SSH client's banner); it returns its port.
func startSSHListener(t *testing.T) (string, <-chan string) {
	t.Helper()
	ssh, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ssh.Close() })
	banner := make(chan string, 1)
	go func() {
		c, err := ssh.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadString('\n')
		banner <- line
	}()
	_, port, _ := net.SplitHostPort(ssh.Addr().String())
	return port, banner
}

// wantBanner fails the test unless ssh's ProxyCommand in the sandbox (r)
// reached startSSHListener's listener with an SSH banner.
func wantBanner(t *testing.T, banner <-chan string, r result) {
	t.Helper()
	select {
	case line := <-banner:
		if !strings.HasPrefix(line, "SSH-2.0-") {
			t.Errorf("ssh through the proxy sent %q, want an SSH banner", line)
		}
	default:
		t.Errorf("ssh's ProxyCommand never reached the allowed host\n%s", r)
	}
}

// reportLine is one line of --report.
type reportLine struct {
	Action, Protocol, Host, Address, Rule, Reason, Sandbox string
	Port                                                   int
	Connections, BytesIn, BytesOut                         int64 `json:",omitempty"`
}

func readReport(t *testing.T, path string) []reportLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("report: %v", err)
	}
	defer f.Close()
	var out []reportLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var raw map[string]any
		if err := json.Unmarshal(sc.Bytes(), &raw); err != nil {
			t.Fatalf("report line %q is not JSON: %v", sc.Text(), err)
		}
		var l reportLine
		_ = json.Unmarshal(sc.Bytes(), &l)
		if v, ok := raw["bytes_in"].(float64); ok {
			l.BytesIn = int64(v)
		}
		if v, ok := raw["bytes_out"].(float64); ok {
			l.BytesOut = int64(v)
		}
		out = append(out, l)
	}
	return out
}

// TestNetProxy: with --net proxy a sandboxed curl reaches an allowed host
// (pinned to a loopback upstream) through the proxy variables hutch sets,
// a host that is not allowed is refused with a reason on curl's side, in
// the report and in hutch's summary, and ssh reaches an allowed host:port
// through GIT_SSH_COMMAND's ProxyCommand (hutch's own CONNECT helper).
func TestNetProxy(t *testing.T) {
	up := startUpstream(t)
	_, port, _ := net.SplitHostPort(up.addr)
	sshPort, banner := startSSHListener(t)

	dir := hostDir(t)
	report := filepath.Join(dir, "report.jsonl")
	script := `
echo "HTTP_PROXY=$HTTP_PROXY ALL_PROXY=$ALL_PROXY"
curl -sS --max-time 10 http://allowed.test:` + port + `/one; echo "RC allowed $?"
curl -sS --max-time 10 -o /dev/null -D - http://blocked.test:` + port + `/two; echo "RC blocked $?"
eval "$GIT_SSH_COMMAND -o BatchMode=yes -o ConnectTimeout=5 -p ` + sshPort + ` git@allowed.test true" </dev/null >/dev/null 2>&1; echo "RC ssh $?"
`
	r := sandboxed(t, invocation{args: sh(script, "--net", "proxy", "--allow-domain", "allowed.test:"+port,
		"--allow-domain", "allowed.test:"+sshPort, "--add-host", "allowed.test:127.0.0.1",
		"--add-host", "blocked.test:127.0.0.1", "--allow-private", "127.0.0.1/32", "--report", report)})
	wantOK(t, r)
	for _, want := range []string{
		"HTTP_PROXY=http://127.0.0.1:3128 ALL_PROXY=socks5h://127.0.0.1:1080",
		"hello from allowed.test:" + port + "/one", "RC allowed 0",
		"403", "X-Hutch-Blocked: not in allowedDomains",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q\n%s", want, r)
		}
	}
	if got := up.requests(); !slices.Equal(got, []string{"allowed.test:" + port + "/one"}) {
		t.Errorf("the upstream got %q, want only the allowed request", got)
	}
	wantBanner(t, banner, r)
	if want := "hutch: blocked 1 connection: blocked.test:" + port + " (not in allowedDomains)"; !strings.Contains(r.stderr, want) {
		t.Errorf("stderr lacks the summary %q\n%s", want, r)
	}
	lines := readReport(t, report)
	var blocked, allowed []reportLine
	for _, l := range lines {
		switch l.Action {
		case "blocked":
			blocked = append(blocked, l)
		case "allowed":
			allowed = append(allowed, l)
		}
	}
	if len(blocked) != 1 || blocked[0].Host != "blocked.test" || blocked[0].Protocol != "http" || blocked[0].Reason != "not in allowedDomains" || blocked[0].Sandbox == "" {
		t.Errorf("report: want one blocked plain-HTTP request to blocked.test, got %+v", blocked)
	}
	var sawHTTP bool
	for _, l := range allowed {
		if l.Host == "allowed.test" && fmt.Sprint(l.Port) == port && l.BytesIn > 0 && l.BytesOut > 0 && l.Connections >= 1 {
			sawHTTP = true
		}
	}
	if !sawHTTP {
		t.Errorf("report: no traffic line for allowed.test:%s with bytes, got %+v", port, allowed)
	}
}

// TestNetHost: --net host shares the host's network, with a warning.
func TestNetHost(t *testing.T) {
	up := startUpstream(t)
	r := sandboxed(t, invocation{args: sh("curl -sS --max-time 10 http://"+up.addr+"/host", "--net", "host")})
	wantOK(t, r)
	if !strings.Contains(r.stdout, "hello from "+up.addr+"/host") {
		t.Errorf("--net host did not reach the host's loopback\n%s", r)
	}
	if !strings.Contains(r.stderr, "warning: --net host") {
		t.Errorf("--net host gave no warning\n%s", r)
	}
}

// TestSRTSettingsReachWhatSRTReaches: srt settings that reach a server on
// the host's loopback under srt — an allowed localhost without a port (so
// on every port), and a name that resolves to an allowed IP literal on
// that literal's port — reach it under --srt-settings too, through the
// proxy; the same name on a port the literal does not allow is refused,
// naming the fix.
func TestSRTSettingsReachWhatSRTReaches(t *testing.T) {
	t.Parallel()
	up := startUpstream(t)
	_, port, _ := net.SplitHostPort(up.addr)
	ws := hostDir(t)
	settings := filepath.Join(ws, "srt.json")
	writeFile(t, settings, `{"network": {"allowedDomains": ["localhost", "myapp.test", "127.0.0.1:`+port+`"]},
 "filesystem": {"allowWrite": ["."]}}`, 0o644)
	curl := `curl -sS --max-time 10 --noproxy '' -x http://127.0.0.1:3128 `
	script := curl + `http://localhost:` + port + `/by-localhost; echo "RC localhost $?"
` + curl + `http://myapp.test:` + port + `/by-name; echo "RC name $?"
` + curl + `-o /dev/null -D - http://myapp.test/other-port | tr -d '\r'; echo "RC other $?"
`
	r := sandboxed(t, invocation{dir: ws, args: sh(script, "--srt-settings", settings, "--add-host", "myapp.test:127.0.0.1")})
	wantOK(t, r)
	for _, want := range []string{
		"hello from localhost:" + port + "/by-localhost", "RC localhost 0",
		"hello from myapp.test:" + port + "/by-name", "RC name 0",
		"X-Hutch-Blocked: resolves to 127.0.0.1 (loopback)", "X-Hutch-Allow: --allow-private 127.0.0.1/32",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q\n%s", want, r)
		}
	}
	if got := up.requests(); !slices.Equal(got, []string{"localhost:" + port + "/by-localhost", "myapp.test:" + port + "/by-name"}) {
		t.Errorf("the upstream got %q", got)
	}
	if want := "hutch: to allow it: --allow-private 127.0.0.1/32\n"; !strings.Contains(r.stderr, want) {
		t.Errorf("stderr lacks %q\n%s", want, r)
	}
}
