package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestFileRefusalsReported: what the sandbox tries at the paths hutch hid
// or protected is refused as before (Permission denied, Read-only file
// system) and reported at exit: each path with what was tried, the rule
// that refused it, how often, and the flag that would allow it; the report
// gets a line for each. Nothing of what is hidden shows in either. A run
// that touches none of them prints nothing more. hutch serves the
// stand-ins itself as root, and as an ordinary user when the user may
// open /dev/fuse (the sandbox's first process mounts them); when the user
// may not, the refusals hold all the same and nothing is reported.
func TestFileRefusalsReported(t *testing.T) {
	testutil.RequireRoot(t)
	nodes := hostDir(t)
	for _, c := range []struct {
		name     string
		uid      int
		fuseMode uint32 // of the node bound over /dev/fuse; 0: the machine's own
		reported bool
	}{
		{"root", 0, 0, true},
		{"user", testutil.UnprivilegedUID, 0o666, true},
		{"user without FUSE", testutil.UnprivilegedUID, 0o600, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			uid := c.uid
			var fuse string
			if c.fuseMode != 0 {
				fuse = filepath.Join(nodes, fmt.Sprintf("fuse-%o", c.fuseMode))
				if err := unix.Mknod(fuse, unix.S_IFCHR|c.fuseMode, int(unix.Mkdev(10, 229))); err != nil && !os.IsExist(err) {
					t.Fatal(err)
				}
				if err := os.Chmod(fuse, os.FileMode(c.fuseMode)); err != nil {
					t.Fatal(err)
				}
			}
			home, ws := hostDir(t), hostDir(t)
			writeFile(t, filepath.Join(home, ".ssh", "id_ed25519"), "PRIVATE-KEY-BYTES\n", 0o600)
			writeFile(t, filepath.Join(home, ".aws", "credentials"), "AWS-SECRET-BYTES\n", 0o600)
			writeFile(t, filepath.Join(home, "notes.txt"), "readable\n", 0o644)
			chownTree(t, uid, home, ws)
			env := []string{"PATH=" + stdPath, "HOME=" + home, "LANG=C.UTF-8"}
			repDir := hostDir(t)
			chownTree(t, uid, repDir)
			rep := filepath.Join(repDir, "report.jsonl")
			script := `cat ~/.ssh/id_ed25519; cat ~/.ssh/id_ed25519; ls ~/.aws; cat ~/.aws/credentials;
				echo evil > .bashrc; echo '{}' > .mcp.json; cat ~/notes.txt; echo ran`
			r := hutch(t, invocation{dir: ws, env: env, uid: uid, fuse: fuse, args: []string{"run", "--report", rep, "--", "sh", "-c", script}})
			wantOK(t, r)
			for _, want := range []string{"id_ed25519: Permission denied", ".aws': Permission denied", "credentials: Permission denied", ".bashrc: Read-only file system", ".mcp.json: Read-only file system"} {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("the command's error %q is missing:\n%s", want, r)
				}
			}
			if !strings.Contains(r.stdout, "readable") || !strings.Contains(r.stdout, "ran") {
				t.Errorf("the rest of the home or the command did not run:\n%s", r)
			}
			for _, secret := range []string{"PRIVATE-KEY-BYTES", "AWS-SECRET-BYTES"} {
				if strings.Contains(r.stdout+r.stderr, secret) {
					t.Errorf("a hidden file's content showed:\n%s", r)
				}
			}
			raw, err := os.ReadFile(rep)
			if err != nil {
				t.Fatal(err)
			}
			if !c.reported {
				if strings.Contains(r.stderr, "hutch: refused") || strings.Contains(string(raw), `"file"`) {
					t.Errorf("a run without FUSE reported file refusals it cannot see:\n%s\n%s", r, raw)
				}
				return
			}
			summary := ""
			for _, l := range lines(r.stderr) {
				if strings.HasPrefix(l, "hutch: refused ") {
					summary = l
				}
			}
			for _, want := range []string{
				"hutch: refused 6 file accesses: ",
				"read " + home + "/.ssh/id_ed25519 (deny-read, a default) ×2",
				"read " + home + "/.aws (deny-read, a default)",
				"read " + home + "/.aws/credentials (deny-read, a default)",
				"write " + ws + "/.bashrc (protected: it would run commands outside the sandbox)",
				"write " + ws + "/.mcp.json (protected: it would run commands outside the sandbox)",
			} {
				if !strings.Contains(summary, want) {
					t.Errorf("the summary lacks %q:\n%s", want, r)
				}
			}
			if !strings.Contains(r.stderr, "hutch: to allow them: --allow-read "+home+"/.ssh --allow-read "+home+"/.aws\n") {
				t.Errorf("the fix line is missing or wrong:\n%s", r)
			}
			type line struct {
				Sandbox, Action, Protocol, Path, Op, Rule, Allow string
				Count                                            int
			}
			var got []line
			for _, l := range lines(string(raw)) {
				var e line
				if err := json.Unmarshal([]byte(l), &e); err != nil {
					t.Fatalf("report line %q: %v", l, err)
				}
				if e.Protocol == "file" {
					got = append(got, e)
				}
			}
			if len(got) != 5 || got[0].Path != home+"/.ssh/id_ed25519" || got[0].Count != 2 || got[0].Action != "blocked" ||
				got[0].Allow != "--allow-read "+home+"/.ssh" || got[0].Sandbox == "" || got[4].Path != ws+"/.mcp.json" || got[4].Op != "write" {
				t.Errorf("report lines %+v", got)
			}

			r = hutch(t, invocation{dir: ws, env: env, uid: uid, fuse: fuse, args: []string{"run", "--", "sh", "-c", "cat ~/notes.txt"}})
			wantOK(t, r)
			if strings.Contains(r.stderr, "refused") {
				t.Errorf("a run that touched nothing hidden reported refusals:\n%s", r)
			}
		})
	}
}

// chownTree gives every file below dirs to uid (and the group of that
// number).
func chownTree(t *testing.T, uid int, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := filepath.Walk(d, func(p string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Chown(p, uid, uid)
		}); err != nil {
			t.Fatal(err)
		}
	}
}
