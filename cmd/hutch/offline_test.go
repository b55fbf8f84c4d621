package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The sandbox without a network (--net none) and the sandbox's name
// lookups in proxy mode: every attempt fails at once with an answer
// clients take as final, and hutch says at exit where the command tried
// to go and which flag would let it. Nothing leaves this machine: the
// names are made up or refused before any lookup.

// lookupProgram is a Go program that looks each argument up with Go's
// own resolver and prints what came back.
const lookupProgram = `package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
)

func main() {
	r := &net.Resolver{PreferGo: true}
	for _, name := range os.Args[1:] {
		addrs, err := r.LookupHost(context.Background(), name)
		var de *net.DNSError
		switch {
		case err == nil:
			fmt.Println("GO", name, "found", addrs)
		case errors.As(err, &de):
			fmt.Println("GO", name, "notfound", de.IsNotFound, "temporary", de.IsTemporary)
		default:
			fmt.Println("GO", name, "error", err)
		}
	}
}
`

// buildLookup builds lookupProgram into dir and returns its path.
func buildLookup(t *testing.T, dir string) string {
	t.Helper()
	gobin := needTool(t, "go")
	src := filepath.Join(t.TempDir(), "main.go")
	writeFile(t, src, lookupProgram, 0o644)
	out := filepath.Join(dir, "lookup")
	cmd := exec.Command(gobin, "build", "-o", out, src)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GO111MODULE=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

// TestNetNoneFailsAtOnce: without a network, a client that uses the proxy
// variables gets hutch's refusal (403, with the reason and the flag that
// would allow it), and name lookups get "no such host" — final for curl,
// glibc (getent, Python), Node and Go, where "temporary failure" made
// them retry. At exit hutch lists the hosts and names, and the flags.
func TestNetNoneFailsAtOnce(t *testing.T) {
	t.Parallel()
	ws := hostDir(t)
	lookup := buildLookup(t, ws)
	script := `
curl -sS -o /dev/null -D - https://proxied.test/x 2>&1 | tr -d '\r'; echo "RC curl-proxy $?"
curl -sS --noproxy '*' http://direct.test/ 2>/dev/null; echo "RC curl-direct $?"
getent hosts getent.test; echo "RC getent $?"
getent hosts localhost >/dev/null && getent hosts hutch >/dev/null; echo "RC loopback names $?"
if command -v python3 >/dev/null; then python3 -c '
import socket
try:
    socket.getaddrinfo("python.test", 443)
except socket.gaierror as e:
    print("PY", e.errno == socket.EAI_NONAME)
'; else echo "PY True"; fi
if command -v node >/dev/null; then node -e 'require("dns").lookup("node.test", (e) => console.log("NODE", e && e.code))'; else echo "NODE ENOTFOUND"; fi
` + lookup + ` go.test
`
	r := sandboxed(t, invocation{dir: ws, args: sh(script)})
	wantOK(t, r)
	for _, want := range []string{
		"HTTP/1.1 403 Forbidden", "X-Hutch-Blocked: the sandbox has no network (--net none)",
		"X-Hutch-Allow: --allow-domain proxied.test",
		"RC curl-direct 6", "RC getent 2", "RC loopback names 0", "PY True", "NODE ENOTFOUND",
		"GO go.test notfound true temporary false",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q\n%s", want, r)
		}
	}
	for _, want := range []string{
		"hutch: blocked 1 connection: proxied.test:443 (the sandbox has no network (--net none))\n",
		`name lookups answered "no such host" (the sandbox has no network (--net none)): direct.test, getent.test`,
		"python.test", "node.test", "go.test",
		"hutch: to allow them: --allow-domain proxied.test --allow-domain direct.test --allow-domain getent.test",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q\n%s", want, r)
		}
	}
	if strings.Contains(r.stderr, "localhost") || strings.Contains(r.stderr, "hutch,") {
		t.Errorf("the sandbox's own names were reported\n%s", r)
	}
}

// TestNetNoneNpmInstall: npm install without a network fails at once
// (it retried the lookup's "temporary failure" for over a minute, and
// retries "no such host" alike): npm gets the proxy's refusal, tries no
// second time, and hutch names the registry and --allow-domain.
func TestNetNoneNpmInstall(t *testing.T) {
	t.Parallel()
	needTool(t, "npm")
	start := time.Now()
	r := sandboxed(t, invocation{args: sh(`npm install --no-audit --no-fund --no-update-notifier --loglevel http left-pad`,
		"--env", "HOME=/tmp", "--env", "npm_config_cache=/tmp/npm-cache")})
	took := time.Since(start)
	if r.code == 0 {
		t.Fatalf("npm install succeeded without a network\n%s", r)
	}
	if !strings.Contains(r.stderr, "E403") {
		t.Errorf("npm did not get hutch's refusal\n%s", r)
	}
	if regexp.MustCompile(`attempt \d+ failed`).MatchString(r.stderr) {
		t.Errorf("npm retried\n%s", r)
	}
	for _, want := range []string{
		"hutch: blocked", "registry.npmjs.org:443 (the sandbox has no network (--net none))",
		"hutch: to allow it: --allow-domain registry.npmjs.org\n",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q\n%s", want, r)
		}
	}
	// Not a timing threshold: npm's first retry alone waited 10 s, and its
	// retries took over a minute in all. (Node's start alone takes
	// seconds on a busy machine.)
	if took > 55*time.Second {
		t.Errorf("npm install took %s to fail", took)
	}
}

// TestNetQuietWithoutNetwork: a command that never touches the network
// gets no word about it, in either mode.
func TestNetQuietWithoutNetwork(t *testing.T) {
	t.Parallel()
	for _, flags := range [][]string{nil, {"--net", "proxy"}} {
		r := sandboxed(t, invocation{args: sh(`ls / >/dev/null; hostname; getent hosts localhost >/dev/null; getent hosts "$(hostname)" >/dev/null`, flags...)})
		wantOK(t, r)
		if r.stderr != "" {
			t.Errorf("%q: hutch said something about a command that never used the network\n%s", flags, r)
		}
	}
}

// TestNetProxyLookups: in proxy mode the sandbox resolves no name
// itself either; its lookups get "no such host" at once and are listed,
// with --allow-domain only for names no rule allows. With --net none given
// explicitly, the fix takes --net proxy too.
func TestNetProxyLookups(t *testing.T) {
	t.Parallel()
	r := sandboxed(t, invocation{args: sh(`getent hosts allowed.test; getent hosts other.test; echo "RC $?"`,
		"--net", "proxy", "--allow-domain", "allowed.test")})
	wantOK(t, r)
	if !strings.Contains(r.stdout, "RC 2") {
		t.Errorf("a lookup did not fail as \"no such host\"\n%s", r)
	}
	for _, want := range []string{
		`hutch: 2 name lookups answered "no such host" (names are resolved by hutch's proxy only: use HTTP_PROXY, HTTPS_PROXY or ALL_PROXY): allowed.test, other.test`,
		"hutch: to allow it: --allow-domain other.test\n",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q\n%s", want, r)
		}
	}

	r = sandboxed(t, invocation{args: sh(`curl -sS -o /dev/null https://example.test/; echo "RC $?"`, "--net", "none")})
	wantOK(t, r)
	if want := "hutch: to allow it: --net proxy --allow-domain example.test\n"; !strings.Contains(r.stderr, want) {
		t.Errorf("stderr lacks %q\n%s", want, r)
	}
}
