package main

import (
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestGVisorNetProxy: under gVisor, --net proxy gives the command the
// namespace tier's proxy (S6): an allowed host (pinned to a loopback
// upstream) is reached through the HTTP proxy, with CONNECT over TLS and
// through SOCKS5, a host that is not allowed gets the 403 naming the flag,
// lookups are answered by hutch, ssh's ProxyCommand (/dev/hutch
// proxy-connect) reaches an allowed port, a direct connection finds no
// route, the proxy's sockets cannot be added to, a unix socket the command
// binds is no host socket, and the report and the summary list it all.
func TestGVisorNetProxy(t *testing.T) {
	flags := gvisorFlags(t)
	up := startUpstream(t)
	_, port, _ := net.SplitHostPort(up.addr)
	tlsUp := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "tls hello from %s%s\n", r.Host, r.URL.Path)
	}))
	defer tlsUp.Close()
	_, tlsPort, _ := net.SplitHostPort(tlsUp.Listener.Addr().String())
	sshPort, banner := startSSHListener(t)

	ws := hostDir(t)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsUp.Certificate().Raw})
	writeFile(t, filepath.Join(ws, "ca.pem"), string(ca), 0o644)
	report := filepath.Join(hostDir(t), "report.jsonl")
	script := `
echo "HTTP_PROXY=$HTTP_PROXY ALL_PROXY=$ALL_PROXY"
curl -sS --max-time 10 http://allowed.test:` + port + `/one; echo "RC allowed $?"
curl -sS --max-time 10 --cacert ca.pem https://example.com:` + tlsPort + `/tls; echo "RC tls $?"
curl -sS --max-time 10 -x "$ALL_PROXY" http://allowed.test:` + port + `/socks; echo "RC socks $?"
curl -sS --max-time 10 -o /dev/null -D - http://blocked.test:` + port + `/two; echo "RC blocked $?"
getent hosts localhost; echo "RC localhost $?"
getent hosts looked-up.test; echo "RC lookup $?"
curl -sS --max-time 10 --noproxy '*' http://192.0.2.1/; echo "RC direct $?"
eval "$GIT_SSH_COMMAND -o BatchMode=yes -o ConnectTimeout=5 -p ` + sshPort + ` git@allowed.test true" </dev/null >/dev/null 2>&1; echo "RC ssh $?"
ls /dev/hutch-proxy | tr '\n' ' '; echo
touch /dev/hutch-proxy/x 2>/dev/null; echo "RC write $?"
/usr/bin/python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.bind("made.sock"); s.listen(); print("bound")'
`
	r := sandboxed(t, invocation{dir: ws, args: sh(script, append(flags, "--net", "proxy",
		"--allow-domain", "allowed.test:"+port, "--allow-domain", "allowed.test:"+sshPort, "--allow-domain", "example.com:"+tlsPort,
		"--add-host", "allowed.test:127.0.0.1", "--add-host", "blocked.test:127.0.0.1", "--add-host", "example.com:127.0.0.1",
		"--allow-private", "127.0.0.1/32", "--report", report)...)})
	wantOK(t, r)
	for _, want := range []string{
		"HTTP_PROXY=http://127.0.0.1:3128 ALL_PROXY=socks5h://127.0.0.1:1080",
		"hello from allowed.test:" + port + "/one", "RC allowed 0",
		"tls hello from example.com:" + tlsPort + "/tls", "RC tls 0",
		"hello from allowed.test:" + port + "/socks", "RC socks 0",
		"403", "X-Hutch-Blocked: not in allowedDomains", "X-Hutch-Allow: --allow-domain blocked.test:" + port,
		"localhost", "RC localhost 0", "RC lookup 2",
		"RC direct 7", "RC ssh ",
		"dns.sock http.sock socks.sock \n", "RC write 1",
		"bound",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q\n%s", want, r)
		}
	}
	if got := up.requests(); !slices.Equal(got, []string{"allowed.test:" + port + "/one", "allowed.test:" + port + "/socks"}) {
		t.Errorf("the upstream got %q, want only the allowed requests", got)
	}
	wantBanner(t, banner, r)
	if _, err := os.Lstat(filepath.Join(ws, "made.sock")); err == nil {
		t.Errorf("the command made a socket on the host (runsc --host-uds must be open only)")
	}
	for _, want := range []string{
		"hutch: blocked 1 connection: blocked.test:" + port + " (not in allowedDomains)",
		`answered "no such host"`, "looked-up.test",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q\n%s", want, r)
		}
	}
	var blocked, lookups []reportLine
	traffic := map[string]bool{}
	for _, l := range readReport(t, report) {
		switch l.Action {
		case "blocked":
			blocked = append(blocked, l)
		case "lookup":
			lookups = append(lookups, l)
		case "allowed":
			if l.BytesIn > 0 && l.BytesOut > 0 && l.Connections >= 1 {
				traffic[fmt.Sprintf("%s:%d", l.Host, l.Port)] = true
			}
		}
	}
	if len(blocked) != 1 || blocked[0].Host != "blocked.test" || blocked[0].Protocol != "http" || blocked[0].Reason != "not in allowedDomains" {
		t.Errorf("report: want one blocked plain-HTTP request to blocked.test, got %+v", blocked)
	}
	if !slices.ContainsFunc(lookups, func(l reportLine) bool { return l.Host == "looked-up.test" && l.Protocol == "dns" }) {
		t.Errorf("report: no lookup of looked-up.test, got %+v", lookups)
	}
	for _, hp := range []string{"allowed.test:" + port, "example.com:" + tlsPort} {
		if !traffic[hp] {
			t.Errorf("report: no traffic line for %s with bytes, got %v", hp, traffic)
		}
	}
}

// TestGVisorNetNone: under gVisor, --net none is gVisor's loopback only:
// no route out, no relay and no proxy sockets in the view, and the command
// is the sandbox's first process.
func TestGVisorNetNone(t *testing.T) {
	flags := gvisorFlags(t)
	ws := hostDir(t)
	script := `
curl -sS --max-time 10 --noproxy '*' http://192.0.2.1/; echo "RC direct $?"
ls /dev/hutch-proxy /dev/hutch >/dev/null 2>&1; echo "RC sockets $?"
tr '\0' ' ' </proc/1/cmdline; echo
`
	r := sandboxed(t, invocation{dir: ws, args: sh(script, append(flags, "--net", "none")...)})
	wantOK(t, r)
	for _, want := range []string{"RC direct 7", "RC sockets 2", "sh -c \n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q\n%s", want, r)
		}
	}
}

// TestGVisorSecrets: under gVisor a secret works as in the namespace tier
// (S3): the command holds a placeholder, trusts the sandbox's CA through
// the bound system bundle, and the upstream of the secret's host gets the
// real value, which never reaches the sandbox, also not in the answer.
func TestGVisorSecrets(t *testing.T) {
	flags := gvisorFlags(t)
	upPort, ca, got := startAuthUpstream(t)
	ws := hostDir(t)
	real := "real-" + strings.Repeat("7f3a", 8)
	env := append(baseEnv(ws), "TOK="+real)
	script := `
echo "env=$TOK"; R=real-; env | grep -c "${R}` + strings.TrimPrefix(real, "real-") + `"
curl -sS --max-time 10 -H "Authorization: Bearer $TOK" https://example.com:` + upPort + `/s; echo "RC secret $?"
`
	r := sandboxed(t, invocation{dir: ws, env: env, args: sh(script, append(flags, "--secret", "TOK@example.com:"+upPort,
		"--upstream-ca", ca, "--add-host", "example.com:127.0.0.1", "--allow-private", "127.0.0.1/32")...)})
	wantOK(t, r)
	if strings.Contains(r.stdout, real) || strings.Contains(r.stderr, real) {
		t.Errorf("the real value reached the sandbox:\n%s", r)
	}
	for _, want := range []string{"env=", "\n0\n", "upstream got Bearer ", "RC secret 0"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q\n%s", want, r)
		}
	}
	select {
	case auth := <-got:
		if auth != "Bearer "+real {
			t.Errorf("the upstream got %q, want the real value", auth)
		}
	default:
		t.Errorf("the upstream got no request\n%s", r)
	}
}

// startAuthUpstream starts a loopback HTTPS server that answers with the
// Authorization header it got and passes it on: its port, the file of its
// certificate (for --upstream-ca) and the headers.
func startAuthUpstream(t *testing.T) (port, ca string, got <-chan string) {
	t.Helper()
	ch := make(chan string, 4)
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		ch <- auth
		fmt.Fprintf(w, "upstream got %s\n", auth)
	}))
	t.Cleanup(up.Close)
	_, port, _ = net.SplitHostPort(up.Listener.Addr().String())
	ca = filepath.Join(hostDir(t), "ca.pem")
	writeFile(t, ca, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw})), 0o644)
	return port, ca, ch
}

// TestGVisorNetProxyOwner: the proxy's sockets are the command's alone,
// also when the workspace's owner (the command's identity) is not root:
// the command reaches the proxy and still cannot add to the directory.
func TestGVisorNetProxyOwner(t *testing.T) {
	flags := gvisorFlags(t)
	ws := testutil.OwnedDir(t, testutil.UnprivilegedUID)
	script := `
id -u
curl -sS --max-time 10 -o /dev/null -w "%{http_code}\n" http://example.test/; echo "RC proxy $?"
touch /dev/hutch-proxy/x 2>/dev/null; echo "RC write $?"
`
	r := sandboxed(t, invocation{dir: ws, args: sh(script, append(flags, "--net", "proxy", "--allow-domain", "allowed.test")...)})
	wantOK(t, r)
	for _, want := range []string{fmt.Sprintf("%d\n", testutil.UnprivilegedUID), "403\nRC proxy 0", "RC write 1"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q\n%s", want, r)
		}
	}
}
