package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestTokenCreate: hutch token create makes the token through the daemon
// it is for (the one at HUTCH_HOST, or the one running on --state-dir, at
// the socket it recorded there), which records it in its audit log; it
// refuses, naming the situation, when the daemon refuses, does not answer,
// or holds the state directory without answering; with no daemon on the
// state directory it writes the token there, says so, and the daemon
// started there later accepts it.
func TestTokenCreate(t *testing.T) {
	d := startDaemon(t)
	dir := t.TempDir()
	token := func(r result) string {
		t.Helper()
		tok := lastLine(r.stdout)
		if r.code != 0 || !strings.HasPrefix(tok, "hutch_") {
			t.Fatalf("token create: %s", r)
		}
		return tok
	}
	worksOverTCP := func(d *daemonProc, tok string) {
		t.Helper()
		if r := d.as(t, d.tcp, tok, nil, "ls", "-q"); r.code != 0 {
			t.Errorf("the new token over TCP: %s", r)
		}
	}

	// Through the daemon at HUTCH_HOST.
	tokA := token(d.admin(t, "token", "create", "--tenant", "alice"))
	worksOverTCP(d, tokA)
	// Through the daemon running on --state-dir, at its recorded socket,
	// with no HUTCH_HOST.
	r := hutch(t, invocation{dir: dir, env: baseEnv(dir), args: []string{"token", "create", "--tenant", "bob", "--state-dir", d.stateDir}})
	tokB := token(r)
	worksOverTCP(d, tokB)
	if r.stderr != "" {
		t.Errorf("token create through the daemon on the state directory said: %s", r.stderr)
	}
	audit, err := os.ReadFile(filepath.Join(d.stateDir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(audit), `"action":"create_token"`); n != 2 || !strings.Contains(string(audit), `"subject":"bob"`) ||
		strings.Contains(string(audit), tokA) || strings.Contains(string(audit), tokB) {
		t.Errorf("audit log: %d create_token records, want 2 with the tenants and no token:\n%s", n, audit)
	}

	// Refused: a tenant's listener; no daemon at HUTCH_HOST; a daemon
	// that holds the state directory but does not answer.
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"over TCP", []string{"HUTCH_HOST=" + d.tcp}, nil, "the daemon at " + d.tcp + " refused"},
		{"no daemon at HUTCH_HOST", []string{"HUTCH_HOST=unix://" + dir + "/none.sock"}, nil, "no daemon answers at HUTCH_HOST=unix://" + dir + "/none.sock"},
		{"bad name", nil, []string{"--tenant", "admin"}, "needs no token"},
	} {
		args := append([]string{"token", "create"}, tc.args...)
		if tc.args == nil {
			args = append(args, "--tenant", "carol")
		}
		r := hutch(t, invocation{dir: dir, env: append(baseEnv(dir), tc.env...), args: args})
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stdout, "hutch_") {
			t.Errorf("%s: want a refusal with %q, got %s", tc.name, tc.want, r)
		}
	}
	held := filepath.Join(dir, "held")
	if err := os.MkdirAll(held, 0o700); err != nil {
		t.Fatal(err)
	}
	lock, err := os.Create(filepath.Join(held, "lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	for _, socket := range []string{"", "unix://" + dir + "/gone.sock"} {
		if socket != "" {
			writeFile(t, filepath.Join(held, "socket"), socket+"\n", 0o644)
		}
		r := hutch(t, invocation{dir: dir, env: baseEnv(dir), args: []string{"token", "create", "--tenant", "carol", "--state-dir", held}})
		if r.code != 1 || !strings.Contains(r.stderr, "runs on "+held+" (it holds its lock)") {
			t.Errorf("a state directory held by a daemon that does not answer (socket %q): %s", socket, r)
		}
	}
	if _, err := os.Stat(filepath.Join(held, "state.db")); err == nil {
		t.Errorf("token create wrote into a state directory a daemon holds")
	}

	// No daemon on the state directory: the token is written there, for
	// the daemon started on it.
	base, err := os.MkdirTemp("", "hutch-serve-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeBase(t, base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	later := &daemonProc{base: base, stateDir: filepath.Join(base, "state"), sock: filepath.Join(base, "s.sock")}
	r = hutch(t, invocation{dir: dir, env: baseEnv(dir), args: []string{"token", "create", "--tenant", "dave", "--state-dir", later.stateDir}})
	tokD := token(r)
	if want := "hutch: no daemon runs on " + later.stateDir + ": the token is stored in " + filepath.Join(later.stateDir, "state.db") + ", for a hutch serve started with --state-dir " + later.stateDir + "\n"; r.stderr != want {
		t.Errorf("token create without a daemon: stderr %q, want %q", r.stderr, want)
	}
	later.start(t)
	worksOverTCP(later, tokD)
}
