package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPrivatePathWarning: when the command names a host file in /tmp that
// the sandbox will not see (its /tmp is its own), hutch says so in one
// line, with what to do; not when the path is in the workspace or an
// --allow-write path, nor when it does not exist on the host (an output
// the command will make).
func TestPrivatePathWarning(t *testing.T) {
	t.Parallel()
	ws := hostDir(t) // outside /tmp
	hostTmp, err := os.MkdirTemp("/tmp", "hutch-private-warning-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hostTmp) })
	if err := os.Chmod(hostTmp, 0o755); err != nil {
		t.Fatal(err)
	}
	host := filepath.Join(hostTmp, "data.txt")
	writeFile(t, host, "host data\n", 0o644)
	want := "hutch: warning: " + host + " is in the host's /tmp, which the sandbox does not see (it gets a private /tmp): pass --allow-write " + hostTmp + ", or put it in the workspace (" + ws + ")\n"

	for _, args := range [][]string{
		{"--", "cat", host},
		{"--", "sh", "-c", "cat '" + host + "' >/dev/null"},
		{"--", "cat", "--input=" + host},
	} {
		r := sandboxed(t, invocation{dir: ws, args: args})
		if r.code == 0 || !strings.HasPrefix(r.stderr, want) {
			t.Errorf("hutch run %q: want the command to fail after the warning\n%sgot %s", args, want, r)
		}
	}
	out := filepath.Join("/tmp", "hutch-private-out-"+filepath.Base(ws)) // made in the sandbox's own /tmp
	for name, inv := range map[string]invocation{
		"allowed":         {dir: ws, args: []string{"--allow-write", hostTmp, "--", "cat", host}},
		"not on the host": {dir: ws, args: []string{"--", "sh", "-c", "echo x > " + out + "; cat " + out}},
	} {
		r := sandboxed(t, inv)
		if wantOK(t, r); strings.Contains(r.stderr, "warning") {
			t.Errorf("%s: %s", name, r)
		}
	}
	// A file right in /tmp: --allow-write /tmp is not the answer.
	f, err := os.CreateTemp("/tmp", "hutch-private-warning-")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Cleanup(func() { os.Remove(f.Name()) })
	r := sandboxed(t, invocation{dir: ws, args: []string{"--", "cat", f.Name(), host}})
	if want := "hutch: warning: " + f.Name() + ", " + host + " are in the host's /tmp, which the sandbox does not see (it gets a private /tmp): pass --allow-write " + hostTmp + ", or put them in the workspace (" + ws + ")\n"; r.code == 0 || !strings.HasPrefix(r.stderr, want) {
		t.Errorf("two files: want\n%sgot %s", want, r)
	}
	r = sandboxed(t, invocation{dir: ws, args: []string{"--", "cat", f.Name()}})
	if want := "hutch: warning: " + f.Name() + " is in the host's /tmp, which the sandbox does not see (it gets a private /tmp): put it in the workspace (" + ws + "), or in a directory of /tmp and pass --allow-write DIR\n"; r.code == 0 || !strings.HasPrefix(r.stderr, want) {
		t.Errorf("a file in /tmp itself: want\n%sgot %s", want, r)
	}
	// A workspace in /tmp is the host's in the sandbox too.
	tmpWS := t.TempDir()
	in := filepath.Join(tmpWS, "data.txt")
	writeFile(t, in, "in the workspace\n", 0o644)
	r = sandboxed(t, invocation{dir: tmpWS, args: []string{"--", "cat", in}})
	if wantOK(t, r); strings.Contains(r.stderr, "warning") || r.stdout != "in the workspace\n" {
		t.Errorf("a file of a workspace in /tmp: %s", r)
	}
}
