package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// rootMappedID is the unprivileged host uid and gid a sandbox started by
// root runs as (S1).
const rootMappedID = 1000000000

// TestIdentity checks S1: the sandbox's user is the workspace owner (root
// starts it) or the invoking user, never the host's root, and files it
// writes in the workspace belong on the host to the workspace's owner.
func TestIdentity(t *testing.T) {
	t.Parallel()
	u := testutil.UnprivilegedUID
	tests := []struct {
		name     string
		owner    int // owner of the workspace
		asUser   int // uid hutch runs as; 0 for root
		innerID  int // uid and gid inside the sandbox
		hostID   int // host uid and gid the sandbox runs as
		fileUser int // owner on the host of a file the sandbox creates
	}{
		{name: "root, root's workspace", owner: 0, asUser: 0, innerID: 0, hostID: rootMappedID, fileUser: 0},
		{name: "root, a user's workspace", owner: u, asUser: 0, innerID: u, hostID: rootMappedID, fileUser: u},
		{name: "unprivileged user", owner: u, asUser: u, innerID: u, hostID: u, fileUser: u},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testutil.RequireRoot(t) // to make workspaces of any owner
			ws := testutil.OwnedDir(t, tc.owner)
			script := `id -u; id -g; cat /proc/self/uid_map /proc/self/gid_map; echo data > created.txt; mkdir created.d`
			r := sandboxed(t, invocation{dir: ws, uid: tc.asUser, args: sh(script)})
			wantOK(t, r)
			out := lines(r.stdout)
			if len(out) != 4 {
				t.Fatalf("unexpected output:\n%s", r.stdout)
			}
			in := strconv.Itoa(tc.innerID)
			if out[0] != in || out[1] != in {
				t.Errorf("inside uid/gid: got %s/%s, want %s", out[0], out[1], in)
			}
			wantMap := []string{in, strconv.Itoa(tc.hostID), "1"}
			for i, name := range []string{"uid_map", "gid_map"} {
				got := strings.Fields(out[2+i])
				if strings.Join(got, " ") != strings.Join(wantMap, " ") {
					t.Errorf("%s: got %q, want %q", name, out[2+i], strings.Join(wantMap, " "))
				}
				if len(got) == 3 && got[1] == "0" {
					t.Errorf("%s maps the sandbox to the host's root: %q", name, out[2+i])
				}
			}
			for _, name := range []string{"created.txt", "created.d"} {
				var st syscall.Stat_t
				if err := syscall.Lstat(filepath.Join(ws, name), &st); err != nil {
					t.Errorf("%s: %v", name, err)
					continue
				}
				if int(st.Uid) != tc.fileUser || int(st.Gid) != tc.fileUser {
					t.Errorf("%s is owned by %d:%d on the host, want %d:%d", name, st.Uid, st.Gid, tc.fileUser, tc.fileUser)
				}
			}
		})
	}
}

// TestNotHostRoot checks that a sandbox started by root cannot use root's
// privileges on host files: a root-only file stays unreadable, and a
// root-owned directory outside the workspace stays closed.
func TestNotHostRoot(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	dir := hostDir(t)
	writeFile(t, filepath.Join(dir, "root-only"), "secret\n", 0o600)
	locked := filepath.Join(dir, "locked")
	if err := os.Mkdir(locked, 0o700); err != nil {
		t.Fatal(err)
	}
	r := sandboxed(t, invocation{args: []string{"--", "sh", "-c",
		`id -u; cat "$1/root-only" 2>/dev/null || echo unreadable; ls "$1/locked" 2>/dev/null || echo closed`, "sh", dir}})
	wantOK(t, r)
	if want := "0\nunreadable\nclosed\n"; r.stdout != want {
		t.Errorf("got %q, want %q (stderr %q)", r.stdout, want, r.stderr)
	}
}
