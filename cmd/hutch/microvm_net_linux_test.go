package main

import (
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestMicroVMNetProxy: in a microVM, --net proxy gives the command the
// other tiers' proxy (S6), relayed over a virtio-serial port, in one boot:
// an allowed host (pinned to a loopback upstream) is reached through the
// HTTP proxy and through SOCKS5, a host that is not allowed gets the 403
// naming the flag, an allowed name that resolves to a private address not
// allowed is refused, lookups are answered by hutch, ssh's ProxyCommand
// (/dev/hutch proxy-connect) reaches an allowed port, there is no route
// out but the proxy, and a secret's placeholder is swapped for its value
// on the way to its host only (trusted through the system bundle in the
// guest), which never reaches the guest.
func TestMicroVMNetProxy(t *testing.T) {
	t.Parallel() // its guest and workspace are its own
	ws := hostDir(t)
	env := microVMEnv(t, ws)
	up := startUpstream(t)
	_, port, _ := net.SplitHostPort(up.addr)
	secretPort, ca, got := startAuthUpstream(t)
	sshPort, banner := startSSHListener(t)
	real := "real-" + strings.Repeat("5c1e", 8)
	env = append(env, "TOK="+real)

	// Under emulation a guest is slow: generous bounds against hanging.
	script := `
echo "HTTP_PROXY=$HTTP_PROXY ALL_PROXY=$ALL_PROXY"
curl -sS --max-time 60 http://allowed.test:` + port + `/one; echo "RC allowed $?"
curl -sS --max-time 60 -x "$ALL_PROXY" http://allowed.test:` + port + `/socks; echo "RC socks $?"
curl -sS --max-time 60 -o /dev/null -D - http://blocked.test:` + port + `/two | tr -d '\r'; echo "RC blocked $?"
curl -sS --max-time 60 -o /dev/null -D - http://private.test:` + port + `/three | tr -d '\r'; echo "RC private $?"
getent hosts looked-up.test; echo "RC lookup $?"
curl -sS --max-time 10 --noproxy '*' http://192.0.2.1/; echo "RC direct $?"
eval "$GIT_SSH_COMMAND -o BatchMode=yes -o ConnectTimeout=60 -p ` + sshPort + ` git@allowed.test true" </dev/null >/dev/null 2>&1; echo "RC ssh $?"
echo "env=$TOK"; R=real-; env | grep -c "${R}` + strings.TrimPrefix(real, "real-") + `"
curl -sS --max-time 60 -H "Authorization: Bearer $TOK" https://example.com:` + secretPort + `/s; echo "RC secret $?"
curl -sS --max-time 60 -k -H "Authorization: Bearer $TOK" https://other.test:` + secretPort + `/o; echo "RC other $?"
`
	start := time.Now()
	r := sandboxed(t, invocation{dir: ws, env: env, args: sh(script, "--tier", "microvm", "--allow-emulation", "--net", "proxy",
		"--allow-domain", "allowed.test:"+port, "--allow-domain", "allowed.test:"+sshPort, "--allow-domain", "private.test:"+port, "--allow-domain", "other.test:"+secretPort,
		"--add-host", "allowed.test:127.0.0.1", "--add-host", "blocked.test:127.0.0.1", "--add-host", "private.test:127.0.0.2",
		"--secret", "TOK@example.com:"+secretPort, "--upstream-ca", ca, "--add-host", "example.com:127.0.0.1", "--add-host", "other.test:127.0.0.1",
		"--allow-private", "127.0.0.1/32")})
	t.Logf("hutch run --tier microvm --net proxy: %v\n%s", time.Since(start), r)
	wantOK(t, r)
	if strings.Contains(r.stdout, real) || strings.Contains(r.stderr, real) {
		t.Errorf("the real value reached the guest:\n%s", r)
	}
	for _, want := range []string{
		"HTTP_PROXY=http://127.0.0.1:3128 ALL_PROXY=socks5h://127.0.0.1:1080",
		"hello from allowed.test:" + port + "/one", "RC allowed 0",
		"hello from allowed.test:" + port + "/socks", "RC socks 0",
		"403", "X-Hutch-Blocked: not in allowedDomains", "X-Hutch-Allow: --allow-domain blocked.test:" + port,
		"X-Hutch-Blocked: resolves to 127.0.0.2",
		"RC lookup 2", "RC direct 7", "RC ssh ",
		"env=", "\n0\n", "upstream got Bearer ", "RC secret 0", "RC other 0",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q\n%s", want, r)
		}
	}
	wantBanner(t, banner, r)
	for _, want := range []string{"hutch: blocked ", "blocked.test:" + port + " (not in allowedDomains)", `answered "no such host"`, "looked-up.test"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q\n%s", want, r)
		}
	}
	if reqs := up.requests(); !slices.Equal(reqs, []string{"allowed.test:" + port + "/one", "allowed.test:" + port + "/socks"}) {
		t.Errorf("the upstream got %q, want only the allowed requests", reqs)
	}
	// Through example.com, its host, the value; through other.test (no
	// secret's, so not opened by the proxy) the placeholder.
	for i, want := range []string{"Bearer " + real, "Bearer "} {
		select {
		case auth := <-got:
			if i == 0 && auth != want || i == 1 && (!strings.HasPrefix(auth, want) || strings.Contains(auth, real)) {
				t.Errorf("request %d to the secret's upstream had %q, want %q (the real value only through its host)", i, auth, want)
			}
		default:
			t.Errorf("the secret's upstream got no request %d\n%s", i, r)
		}
	}
}
