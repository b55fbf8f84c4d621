package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/client"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// The tests in this file start `hutch serve` and drive it with the client
// commands (create, exec, cp, ls, rm, token create) as a user would.

// daemonProc is a `hutch serve` the test started.
type daemonProc struct {
	cmd      *exec.Cmd
	base     string // holds the socket and the state directory
	stateDir string
	sock     string   // HUTCH_HOST for the admin
	tcp      string   // http://127.0.0.1:PORT
	flags    []string // given to hutch serve besides the socket, state and listen flags
	env      []string // added to hutch serve's environment
	log      *testutil.Buffer
	exited   chan struct{}
	waitErr  error
}

// startDaemon starts `hutch serve` on a socket and a TCP port of its own;
// the test's cleanup kills it (by pid) if it still runs, and every
// process of its sandboxes that is left.
func startDaemon(t *testing.T) *daemonProc {
	t.Helper()
	return startDaemonWith(t, nil, "--warm", "2")
}

// startDaemonWith starts `hutch serve` as startDaemon does, with flags
// instead of --warm 2, once setup (if not nil) prepared its state
// directory (made, empty).
func startDaemonWith(t *testing.T, setup func(stateDir string), flags ...string) *daemonProc {
	t.Helper()
	return startDaemonEnv(t, nil, setup, flags...)
}

// startDaemonEnv is startDaemonWith with env added to hutch serve's
// environment.
func startDaemonEnv(t *testing.T, env []string, setup func(stateDir string), flags ...string) *daemonProc {
	t.Helper()
	testutil.RequireRoot(t)
	base, err := os.MkdirTemp("", "hutch-serve-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeBase(t, base) })
	d := &daemonProc{base: base, stateDir: filepath.Join(base, "state"), sock: filepath.Join(base, "s.sock"), flags: flags, env: env}
	if setup != nil {
		if err := os.Mkdir(d.stateDir, 0o700); err != nil {
			t.Fatal(err)
		}
		setup(d.stateDir)
	}
	d.start(t)
	return d
}

// removeBase removes a daemon's base directory once the daemon stopped,
// with what it left mounted there (its volumes, which outlive it by
// design): registered before the daemon's own cleanup, it runs after it.
func removeBase(t *testing.T, base string) {
	if err := testutil.RemoveMounted(base); err != nil {
		t.Errorf("the daemon's directory: %v", err)
	}
}

// start starts d's `hutch serve` (again, after it ended) and waits for it
// to listen.
func (d *daemonProc) start(t *testing.T) {
	t.Helper()
	d.log, d.exited, d.tcp = &testutil.Buffer{}, make(chan struct{}), ""
	d.cmd = exec.Command(testutil.Hutch(t), append([]string{"serve", "--socket", d.sock, "--state-dir", d.stateDir, "--listen", "127.0.0.1:0"}, d.flags...)...)
	d.cmd.Env = append(baseEnv(d.base), d.env...)
	d.cmd.Dir = d.base
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cmd, exited, log := d.cmd, d.exited, d.log
	go func() {
		d.waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		left := sandboxProcs(t, cmd.Process.Pid)
		// A daemon still running is stopped as an operator would, so
		// that it removes its sandboxes' cgroups; killed, it would leave
		// them to a next daemon on the same state directory.
		select {
		case <-exited:
		default:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(guard):
				_ = cmd.Process.Signal(syscall.SIGKILL)
				<-exited
			}
		}
		for _, p := range left {
			p.kill()
		}
		if t.Failed() {
			t.Logf("hutch serve's log:\n%s", log.String())
		}
	})
	deadline := time.Now().Add(guard)
	for {
		for _, l := range strings.Split(d.log.String(), "\n") {
			for _, scheme := range []string{"http://", "https://"} {
				if addr, ok := strings.CutPrefix(l, "hutch: listening on "+scheme); ok {
					d.tcp = scheme + strings.TrimSpace(addr)
				}
			}
		}
		if _, err := os.Stat(d.sock); err == nil && d.tcp != "" {
			if !strings.Contains(d.log.String(), "hutch: listening on unix://"+d.sock+"\n") {
				t.Errorf("hutch serve does not name its socket:\n%s", d.log.String())
			}
			return
		}
		select {
		case <-d.exited:
			t.Fatalf("hutch serve ended at start: %v\n%s", d.waitErr, d.log.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("hutch serve did not listen within %s:\n%s", guard, d.log.String())
		}
	}
}

// as runs a client command of hutch against the daemon: on its socket
// without a token, or at host with token.
func (d *daemonProc) as(t *testing.T, host, token string, stdin io.Reader, args ...string) result {
	t.Helper()
	dir := t.TempDir()
	if host == "" {
		host = "unix://" + d.sock
	}
	env := append(baseEnv(dir), "HUTCH_HOST="+host)
	if token != "" {
		env = append(env, "HUTCH_TOKEN="+token)
	}
	// No controlling terminal: a client asks nothing there.
	return hutch(t, invocation{args: args, dir: dir, env: env, stdin: stdin, noTTY: true})
}

// admin runs a client command on the daemon's socket.
func (d *daemonProc) admin(t *testing.T, args ...string) result {
	t.Helper()
	return d.as(t, "", "", nil, args...)
}

// adminID runs the client command args on the daemon's socket, which
// must succeed and print an id (hutch create's, hutch snapshot's) last,
// and returns that id.
func (d *daemonProc) adminID(t *testing.T, args ...string) string {
	t.Helper()
	r := d.admin(t, args...)
	wantOK(t, r)
	return lastLine(r.stdout)
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	ls := lines(s)
	if len(ls) == 0 {
		return ""
	}
	return ls[len(ls)-1]
}

// sandboxProc is a process of a sandbox: one in another pid namespace
// than the daemon, below it in the process tree.
type sandboxProc struct {
	pid   int
	start string // field 22 of /proc/PID/stat, against pid reuse
	pidns string
}

// alive reports whether the process still exists (and is not a zombie).
func (p sandboxProc) alive() bool {
	fields, err := procStat(p.pid)
	return err == nil && fields[19] == p.start && fields[0] != "Z"
}

func (p sandboxProc) kill() {
	if p.alive() {
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
	}
}

// procStat returns the fields of /proc/PID/stat after the command's name:
// [0] is the state, [1] the ppid, [19] the start time.
func procStat(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, errors.New("malformed stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return nil, errors.New("short stat")
	}
	return f, nil
}

// sandboxProcs returns the processes below root that live in another pid
// namespace than root.
func sandboxProcs(t *testing.T, root int) []sandboxProc {
	t.Helper()
	rootNS, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", root))
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	parent := map[int]int{}
	start := map[int]string{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f, err := procStat(pid); err == nil {
			ppid, _ := strconv.Atoi(f[1])
			parent[pid], start[pid] = ppid, f[19]
		}
	}
	var out []sandboxProc
	for pid := range parent {
		below := false
		for p, n := parent[pid], 0; p > 1 && n < 1000; p, n = parent[p], n+1 {
			if p == root {
				below = true
				break
			}
		}
		if !below {
			continue
		}
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
		if err == nil && ns != rootNS {
			out = append(out, sandboxProc{pid: pid, start: start[pid], pidns: ns})
		}
	}
	return out
}

// TestServe drives a daemon through its life: sandboxes made and used
// with the client commands, files copied both ways (and traversals
// refused), tenants on TCP, and finally SIGTERM, which must end every
// sandbox.
func TestServe(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()

	// The warm pool (--warm 2) fills, and the create takes from it; its
	// environment reaches the commands all the same (exec below).
	for end := time.Now().Add(guard); !strings.Contains(d.log.String(), "warm=2 size=2"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the warm pool did not fill:\n%s", d.log.String())
		}
	}
	r := d.admin(t, "create", "--label", "suite=e2e", "--env", "GREETING=hello", "--timeout", "10m")
	wantOK(t, r)
	// The daemon's log reaches d.log through a pipe, a moment after.
	if !testutil.Eventually(guard, func() bool { return strings.Contains(d.log.String(), "warm=true") }) {
		t.Errorf("the create did not take a warm sandbox:\n%s", d.log.String())
	}
	id := lastLine(r.stdout)
	if id == "" {
		t.Fatalf("create printed no id: %s", r)
	}
	c, err := client.New("unix://"+d.sock, "")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	ws := sb.Workspace

	t.Run("exec", func(t *testing.T) {
		r := d.admin(t, "exec", id, "--", "sh", "-c", "echo hi; exit 3")
		wantCode(t, r, 3)
		if r.stdout != "hi\n" {
			t.Errorf("stdout %q", r.stdout)
		}
		r = d.admin(t, "exec", id, "--", "sh", "-c", `echo "$GREETING from $(pwd)" >&2`)
		wantOK(t, r)
		if r.stderr != "hello from "+ws+"\n" {
			t.Errorf("stderr %q, want the sandbox's environment and workspace", r.stderr)
		}
		r = d.as(t, "", "", strings.NewReader("some input\nand more\n"), "exec", "-i", id, "--", "tr", "a-z", "A-Z")
		wantOK(t, r)
		if r.stdout != "SOME INPUT\nAND MORE\n" {
			t.Errorf("exec -i: %q", r.stdout)
		}
		wantCode(t, d.admin(t, "exec", id, "--", "no-such-command-anywhere"), 127)
		r = d.admin(t, "exec", "--timeout", "200ms", id, "--", "sleep", "30")
		wantCode(t, r, 124)
		r = d.admin(t, "exec", "no-such-sandbox", "--", "true")
		wantCode(t, r, 125)
		if !strings.Contains(r.stderr, "404") {
			t.Errorf("exec in a missing sandbox: %s", r)
		}
	})

	t.Run("create with the flags of run", func(t *testing.T) {
		const real = "e2e-real-token-value"
		dir := t.TempDir()
		env := append(baseEnv(dir), "HUTCH_HOST=unix://"+d.sock, "E2E_TOKEN="+real)
		r := hutch(t, invocation{dir: dir, env: env, args: []string{"create", "--memory", "128m", "--disk", "32m",
			"--allow-domain", "example.com", "--secret", "E2E_TOKEN@example.com", "--env", "A=b", "--label", "kind=flags"}})
		wantOK(t, r)
		fid := lastLine(r.stdout)
		r = d.admin(t, "exec", fid, "--", "sh", "-c", `echo "A=$A proxy=$HTTPS_PROXY"; df -k / | tail -1 | awk '{print $2}'; echo "$E2E_TOKEN"`)
		wantOK(t, r)
		got := lines(r.stdout)
		if len(got) != 3 || got[0] != "A=b proxy=http://127.0.0.1:3128" || got[1] != "32768" || got[2] == "" || strings.Contains(got[2], real) {
			t.Errorf("in the sandbox: %q", got)
		}
		// PID 1 is hutch-agent, which also serves ssh's proxy-connect.
		if !strings.Contains(d.log.String(), "the sandboxes' agent\" binary="+filepath.Join(filepath.Dir(testutil.Hutch(t)), "hutch-agent")) {
			t.Errorf("the daemon does not use hutch-agent:\n%s", d.log.String())
		}
		agentInfo, err := os.Stat(filepath.Join(filepath.Dir(testutil.Hutch(t)), "hutch-agent"))
		if err != nil {
			t.Fatal(err)
		}
		r = d.admin(t, "exec", fid, "--", "sh", "-c", "stat -L -c %s /dev/hutch; /dev/hutch proxy-connect example.com 22 </dev/null")
		if r.code != 1 || strings.TrimSpace(r.stdout) != strconv.FormatInt(agentInfo.Size(), 10) || !strings.Contains(r.stderr, "proxy-connect: example.com:22 refused") {
			t.Errorf("PID 1 (want hutch-agent, %d bytes) and proxy-connect in a served sandbox: %s", agentInfo.Size(), r)
		}
		wantOK(t, d.admin(t, "rm", fid))
		// A secret whose variable is not set here is refused before anything is made.
		r = hutch(t, invocation{dir: dir, env: append(baseEnv(dir), "HUTCH_HOST=unix://"+d.sock), args: []string{"create", "--secret", "E2E_TOKEN@example.com"}})
		wantCode(t, r, 2)
		if !strings.Contains(r.stderr, "E2E_TOKEN") {
			t.Errorf("create without the secret's value: %s", r)
		}
		wantCode(t, d.admin(t, "create", "--disk", "lots"), 2)
	})

	t.Run("cp", func(t *testing.T) {
		local := t.TempDir()
		content := strings.Repeat("line of a file\n", 5000)
		writeFile(t, filepath.Join(local, "f.txt"), content, 0o640)
		wantOK(t, d.admin(t, "cp", filepath.Join(local, "f.txt"), id+":f.txt"))
		r := d.admin(t, "exec", id, "--", "sh", "-c", "cat f.txt | wc -l; stat -c %a f.txt")
		wantOK(t, r)
		if got := lines(r.stdout); !slices.Equal(got, []string{"5000", "640"}) {
			t.Errorf("in the sandbox: %q", got)
		}
		wantOK(t, d.admin(t, "cp", id+":"+ws+"/f.txt", filepath.Join(local, "back.txt")))
		if b, err := os.ReadFile(filepath.Join(local, "back.txt")); err != nil || string(b) != content {
			t.Errorf("copied back: %d bytes, %v", len(b), err)
		}
		r = d.admin(t, "cp", id+":f.txt", "-")
		if wantOK(t, r); r.stdout != content {
			t.Errorf("cp to stdout: %d bytes", len(r.stdout))
		}

		tree := filepath.Join(local, "tree")
		writeFile(t, filepath.Join(tree, "a.txt"), "A\n", 0o644)
		writeFile(t, filepath.Join(tree, "sub", "b.txt"), "B\n", 0o600)
		writeFile(t, filepath.Join(tree, "sub", "deeper", "run.sh"), "#!/bin/sh\necho ran\n", 0o755)
		if err := os.Symlink("sub/b.txt", filepath.Join(tree, "link")); err != nil {
			t.Fatal(err)
		}
		wantOK(t, d.admin(t, "cp", tree, id+":tree"))
		r = d.admin(t, "exec", id, "--", "sh", "-c", "cd tree && find . | sort && cat link && sub/deeper/run.sh")
		wantOK(t, r)
		wantTree := []string{".", "./a.txt", "./link", "./sub", "./sub/b.txt", "./sub/deeper", "./sub/deeper/run.sh", "B", "ran"}
		if got := lines(r.stdout); !slices.Equal(got, wantTree) {
			t.Errorf("the tree in the sandbox:\n%s", r.stdout)
		}
		// Into an existing directory, as cp does.
		wantOK(t, d.admin(t, "exec", id, "--", "mkdir", "into"))
		wantOK(t, d.admin(t, "cp", tree, id+":into"))
		wantOK(t, d.admin(t, "exec", id, "--", "test", "-f", "into/tree/sub/b.txt"))

		out := filepath.Join(local, "out")
		wantOK(t, d.admin(t, "cp", id+":tree", out))
		for name, want := range map[string]string{"a.txt": "A\n", "sub/b.txt": "B\n", "sub/deeper/run.sh": "#!/bin/sh\necho ran\n"} {
			if b, err := os.ReadFile(filepath.Join(out, name)); err != nil || string(b) != want {
				t.Errorf("%s copied back: %q, %v", name, b, err)
			}
		}
		if l, err := os.Readlink(filepath.Join(out, "link")); err != nil || l != "sub/b.txt" {
			t.Errorf("link copied back: %q, %v", l, err)
		}
		if fi, err := os.Stat(filepath.Join(out, "sub/deeper/run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("run.sh copied back: %v, %v", fi, err)
		}
	})

	t.Run("traversal", func(t *testing.T) {
		sum := func() [32]byte {
			b, err := os.ReadFile("/etc/passwd")
			if err != nil {
				t.Fatal(err)
			}
			return sha256.Sum256(b)
		}
		before := sum()
		local := t.TempDir()
		writeFile(t, filepath.Join(local, "x"), "root::0:0::/:/bin/sh\n", 0o644)
		for _, dst := range []string{"../../etc/passwd", ws + "/../../../etc/passwd", "/etc/../etc/passwd"} {
			r := d.admin(t, "cp", filepath.Join(local, "x"), id+":"+dst)
			if r.code == 0 || !strings.Contains(r.stderr, "400") {
				t.Errorf("cp x %s:%s: %s", id, dst, r)
			}
		}
		r := d.admin(t, "cp", id+":../../etc/shadow", filepath.Join(local, "shadow"))
		if r.code == 0 || !strings.Contains(r.stderr, "400") {
			t.Errorf("cp of ../../etc/shadow out: %s", r)
		}
		if sum() != before {
			t.Fatal("/etc/passwd changed")
		}

		marker := "escaped-" + strconv.Itoa(os.Getpid())
		for _, entries := range [][]tarEntryE2E{
			{{name: "ok.txt", body: "fine"}, {name: "../" + marker, body: "x"}},
			{{name: "../../../../../../../tmp/" + marker, body: "x"}},
			{{name: "/tmp/" + marker, body: "x"}},
			{{name: "l", link: "/tmp"}, {name: "l/" + marker, body: "x"}},
			{{name: "l2", link: "../../../../../../../tmp"}},
		} {
			_, err := c.Upload(ctx, id, ws+"/up", bytes.NewReader(tarOf(t, entries)))
			var e *client.Error
			if !errors.As(err, &e) || e.Status != 400 || !errors.Is(err, client.ErrInvalid) {
				t.Errorf("upload of %v: %v", entries, err)
			}
		}
		// Nothing landed outside: not next to the target in the sandbox,
		// not in /tmp (the host's or the sandbox's), nowhere in the state
		// directory.
		r = d.admin(t, "exec", id, "--", "sh", "-c", "ls -a "+ws+" /tmp; cat up/ok.txt")
		wantOK(t, r)
		if strings.Contains(r.stdout, marker) || !strings.HasSuffix(r.stdout, "fine") {
			t.Errorf("in the sandbox:\n%s", r.stdout)
		}
		if _, err := os.Lstat("/tmp/" + marker); err == nil {
			t.Errorf("/tmp/%s was written on the host", marker)
		}
		_ = filepath.WalkDir(d.base, func(p string, e fs.DirEntry, err error) error {
			if err == nil && strings.Contains(e.Name(), marker) {
				t.Errorf("%s was written", p)
			}
			return nil
		})
	})

	t.Run("ls and rm", func(t *testing.T) {
		r := d.admin(t, "create", "--label", "suite=other")
		wantOK(t, r)
		other := lastLine(r.stdout)
		r = d.admin(t, "ls")
		wantOK(t, r)
		if !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, other) || !strings.HasPrefix(r.stdout, "ID") || !strings.Contains(r.stdout, "suite=e2e") ||
			!strings.Contains(lines(r.stdout)[0], " TIER ") || !strings.Contains(lines(r.stdout)[0], " IMAGE ") || !strings.Contains(r.stdout, "running  namespace  -  ") {
			t.Errorf("ls:\n%s", r.stdout)
		}
		r = d.admin(t, "ls", "-q", "--label", "suite=e2e")
		if wantOK(t, r); strings.TrimSpace(r.stdout) != id {
			t.Errorf("ls --label suite=e2e: %q", r.stdout)
		}
		r = d.admin(t, "rm", other)
		if wantOK(t, r); strings.TrimSpace(r.stdout) != other {
			t.Errorf("rm printed %q", r.stdout)
		}
		r = d.admin(t, "ls", "-q", "--state", "running")
		if wantOK(t, r); strings.Contains(r.stdout, other) {
			t.Errorf("ls after rm: %q", r.stdout)
		}
		if r := d.admin(t, "exec", other, "--", "true"); r.code == 0 {
			t.Errorf("exec after rm: %s", r)
		}
		// The events of the destroyed sandbox are still kept: hutch events
		// prints them and returns after "ended".
		r = d.admin(t, "events", other)
		wantOK(t, r)
		if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) < 4 ||
			!strings.Contains(lines[0], " created ") || !strings.Contains(lines[len(lines)-2], " destroyed ") || !strings.Contains(lines[len(lines)-1], " ended ") {
			t.Errorf("events:\n%s", r.stdout)
		}
		wantCode(t, d.admin(t, "rm", "no-such-sandbox"), 1)
	})

	t.Run("metrics and network", func(t *testing.T) {
		r := d.admin(t, "create", "--allow-domain", "example.org")
		wantOK(t, r)
		sb := lastLine(r.stdout)
		defer d.admin(t, "rm", sb)
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
			r = d.admin(t, "metrics", sb)
			wantOK(t, r)
			if ls := lines(r.stdout); len(ls) >= 2 && strings.HasPrefix(ls[0], "TIME") && strings.Contains(ls[1], " MiB / ") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no sample in a minute:\n%s", r.stdout)
			}
		}
		r = d.admin(t, "network", "--allow-domain", "Example.com", "--deny-domain", "bad.example.com", sb)
		if wantOK(t, r); r.stdout != "mode proxy\nallow example.com\ndeny bad.example.com\n" {
			t.Errorf("network printed %q", r.stdout)
		}
		r = d.admin(t, "network", "--offline", sb)
		if wantOK(t, r); r.stdout != "mode none\n" {
			t.Errorf("network --offline printed %q", r.stdout)
		}
		if r = d.admin(t, "network", "--allow-cidr", "10.0.0.0/8", "no-such-sandbox"); r.code != 1 || !strings.Contains(r.stderr, "404") {
			t.Errorf("network of no sandbox: %s", r)
		}
	})

	t.Run("tenants on TCP", func(t *testing.T) {
		token := func(tenant string) string {
			r := d.admin(t, "token", "create", "--tenant", tenant, "--state-dir", d.stateDir)
			wantOK(t, r)
			tok := lastLine(r.stdout)
			if !strings.HasPrefix(tok, "hutch_") {
				t.Fatalf("token create: %s", r)
			}
			return tok
		}
		tokA, tokB := token("tenant-a"), token("tenant-b")
		for _, authz := range []string{"", "Bearer hutch_nope", "Bearer " + tokA + "x"} {
			req, _ := http.NewRequest("GET", d.tcp+"/v1/sandboxes", nil)
			if authz != "" {
				req.Header.Set("Authorization", authz)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 401 || !strings.Contains(string(body), `"unauthorized"`) {
				t.Errorf("TCP with %q: %d %s", authz, resp.StatusCode, body)
			}
		}
		wantCode(t, d.as(t, d.tcp, "", nil, "ls"), 1)

		r := d.as(t, d.tcp, tokA, nil, "create", "--label", "owner=a")
		wantOK(t, r)
		idA := lastLine(r.stdout)
		r = d.as(t, d.tcp, tokA, nil, "exec", idA, "--", "echo", "over tcp")
		if wantOK(t, r); r.stdout != "over tcp\n" {
			t.Errorf("exec over TCP: %q", r.stdout)
		}
		r = d.as(t, d.tcp, tokA, nil, "ls", "-q")
		if wantOK(t, r); strings.TrimSpace(r.stdout) != idA {
			t.Errorf("tenant A lists %q", r.stdout)
		}
		r = d.as(t, d.tcp, tokB, nil, "exec", idA, "--", "true")
		if wantCode(t, r, 125); !strings.Contains(r.stderr, "404") {
			t.Errorf("tenant B execs in A's sandbox: %s", r)
		}
		r = d.as(t, d.tcp, tokB, nil, "ls", "-q")
		if wantOK(t, r); strings.TrimSpace(r.stdout) != "" {
			t.Errorf("tenant B lists %q", r.stdout)
		}
		r = d.as(t, d.tcp, tokB, nil, "rm", idA)
		if wantCode(t, r, 1); !strings.Contains(r.stderr, "404") {
			t.Errorf("tenant B removes A's sandbox: %s", r)
		}
		// Nor does the admin see it: it is a tenant of its own.
		if r := d.admin(t, "ls", "-q"); strings.Contains(r.stdout, idA) {
			t.Errorf("the admin lists A's sandbox: %q", r.stdout)
		}
		// A remote tenant may not reach into the host through a policy.
		pol := filepath.Join(t.TempDir(), "policy.yaml")
		writeFile(t, pol, "filesystem:\n  allow_write: [/etc]\n", 0o644)
		r = d.as(t, d.tcp, tokA, nil, "create", "--policy", pol)
		if wantCode(t, r, 1); !strings.Contains(r.stderr, "403") {
			t.Errorf("remote create with allow_write: %s", r)
		}
	})

	t.Run("pause and resume", func(t *testing.T) { testPause(t, d) })

	t.Run("terminal", func(t *testing.T) { execOnTerminal(t, d, id, "-i", "-t") })
	t.Run("terminal -it", func(t *testing.T) { execOnTerminal(t, d, id, "-it") })
	// -t alone on a terminal forwards its input too: keys reach the
	// command (docker's -t alone would swallow them, Ctrl-C included).
	t.Run("terminal -t alone", func(t *testing.T) { execOnTerminal(t, d, id, "-t") })
	t.Run("-t without a terminal", func(t *testing.T) {
		r := d.as(t, "", "", strings.NewReader("not for the command\n"), "exec", "-t", id, "--", "sh", "-c", "test -t 0 && test -t 1 && echo on a terminal")
		if wantOK(t, r); strings.TrimSpace(r.stdout) != "on a terminal" {
			t.Errorf("exec -t with pipes: %s", r)
		}
	})

	t.Run("SIGTERM ends every sandbox", func(t *testing.T) {
		r := d.admin(t, "exec", id, "--", "sh", "-c", "sleep 1000 >/dev/null 2>&1 &")
		wantOK(t, r)
		procs := sandboxProcs(t, d.cmd.Process.Pid)
		namespaces := map[string]bool{}
		for _, p := range procs {
			namespaces[p.pidns] = true
		}
		if len(namespaces) < 2 {
			t.Fatalf("want the processes of at least 2 sandboxes below the daemon, found %+v", procs)
		}
		if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-d.exited:
		case <-time.After(guard):
			t.Fatalf("hutch serve did not end within %s of SIGTERM", guard)
		}
		if d.waitErr != nil {
			t.Errorf("hutch serve after SIGTERM: %v", d.waitErr)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			var alive []sandboxProc
			for _, p := range procs {
				if p.alive() {
					alive = append(alive, p)
				}
			}
			inNS := processesIn(namespaces)
			if len(alive) == 0 && len(inNS) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after the daemon ended, still alive: %+v; in the sandboxes' pid namespaces: %v", alive, inNS)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if _, err := os.Lstat(d.sock); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the socket is left after SIGTERM: %v", err)
		}
	})
}

// processesIn returns the pids of every process on the host in one of
// the pid namespaces.
func processesIn(namespaces map[string]bool) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err == nil && namespaces[ns] {
			if f, err := procStat(pid); err == nil && f[0] != "Z" {
				out = append(out, pid)
			}
		}
	}
	sort.Ints(out)
	return out
}

// tarEntryE2E is an entry of a crafted archive: a file, or a symlink
// when link is set.
type tarEntryE2E struct{ name, body, link string }

func tarOf(t *testing.T, entries []tarEntryE2E) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(e.body))}
		if e.link != "" {
			hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeSymlink, e.link, 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write([]byte(e.body))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// execOnTerminal runs `hutch exec FLAGS` (-i -t, -it, -t) on a terminal:
// the local terminal is put in raw mode (the remote one echoes and
// edits), typed input and a change of its size reach the command, and its
// mode is restored at the end.
func execOnTerminal(t *testing.T, d *daemonProc, id string, flags ...string) {
	term := newTerminal(t, 24, 80)
	before, err := unix.IoctlGetTermios(int(term.slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	dir := t.TempDir()
	args := append(append([]string{"exec"}, flags...), id, "--", "sh", "-c", "stty size; read x; stty size; echo got $x")
	cmd := exec.CommandContext(ctx, testutil.Hutch(t), args...)
	cmd.Dir = dir
	cmd.Env = append(baseEnv(dir), "TERM=xterm", "HUTCH_HOST=unix://"+d.sock)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = term.slave, term.slave, term.slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	go term.read()
	term.waitFor(t, "24 80")
	if err := unix.IoctlSetWinsize(int(term.master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 30, Col: 100}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // for hutch to pass the new size on
	if _, err := term.master.Write([]byte("abc\r")); err != nil {
		t.Fatal(err)
	}
	term.waitFor(t, "got abc")
	if code := exitCode(t, waited); code != 0 {
		t.Errorf("exit %d; the terminal showed:\n%s", code, term.shown())
	}
	shown := term.shown()
	if !strings.Contains(shown, "30 100") {
		t.Errorf("the new size did not reach the command:\n%s", shown)
	}
	if strings.Count(shown, "abc") != 2 { // the remote echo, and "got abc"; no local echo
		t.Errorf("want abc echoed once, by the remote terminal:\n%q", shown)
	}
	after, err := unix.IoctlGetTermios(int(term.slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if after.Lflag != before.Lflag || after.Iflag != before.Iflag || after.Oflag != before.Oflag {
		t.Errorf("the terminal's mode was not restored: %s, was %s", modes(after), modes(before))
	}
}
