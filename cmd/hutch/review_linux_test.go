package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// summaryID finds the change set's id in hutch run --review's summary.
var summaryID = regexp.MustCompile(`hutch: change set ([0-9a-f]{12}): `)

// TestRunReview: hutch run --review, started by root and by a user, in a
// workspace of the user's: the command works on its workspace as usual
// (reads it, writes it, sees its own writes), the user's files do not
// change, and hutch ends with a summary naming the change set. A second
// command with --continue sees the first one's changes and adds to the
// same set; hutch changes apply then makes the workspace what the
// sandbox saw, every file the workspace owner's. A command that changes
// nothing leaves no change set.
func TestRunReview(t *testing.T) {
	testutil.RequireRoot(t)
	for _, who := range []struct {
		name string
		uid  int
	}{{"root", 0}, {"user", testutil.UnprivilegedUID}} {
		t.Run(who.name, func(t *testing.T) {
			owner := testutil.UnprivilegedUID
			ws := testutil.OwnedDir(t, owner)
			state := hostDir(t)
			if err := os.Chown(state, who.uid, who.uid); err != nil {
				t.Fatal(err)
			}
			for name, content := range map[string]string{"keep.txt": "keep\n", "edit.txt": "one\n", "gone.txt": "bye\n"} {
				p := filepath.Join(ws, name)
				writeFile(t, p, content, 0o644)
				if err := os.Chown(p, owner, owner); err != nil {
					t.Fatal(err)
				}
			}
			env := append(baseEnv(ws), "XDG_STATE_HOME="+state)
			run := func(args ...string) result {
				t.Helper()
				return hutch(t, invocation{args: args, dir: ws, env: env, uid: who.uid})
			}
			r := run(append([]string{"run", "--review"}, sh("cat keep.txt; echo two >> edit.txt; cat edit.txt; rm gone.txt; echo new > new.txt; cat new.txt")...)...)
			wantOK(t, r)
			if r.stdout != "keep\none\ntwo\nnew\n" {
				t.Errorf("the command's view of its workspace: %q", r.stdout)
			}
			m := summaryID.FindStringSubmatch(r.stderr)
			if m == nil || !strings.Contains(r.stderr, "1 added, 1 modified, 1 deleted") {
				t.Fatalf("no summary of the change set:\n%s", r)
			}
			id := m[1]
			for name, want := range map[string]string{"edit.txt": "one\n", "gone.txt": "bye\n"} {
				if b, err := os.ReadFile(filepath.Join(ws, name)); err != nil || string(b) != want {
					t.Errorf("the workspace's %s changed: %q, %v", name, b, err)
				}
			}
			if _, err := os.Stat(filepath.Join(ws, "new.txt")); !os.IsNotExist(err) {
				t.Errorf("new.txt reached the workspace: %v", err)
			}

			// --continue with a prefix: on top of the first command's writes.
			r = run(append([]string{"run", "--continue", id[:6]}, sh("cat new.txt; test -e gone.txt || echo no-gone; echo more >> new.txt")...)...)
			wantOK(t, r)
			if r.stdout != "new\nno-gone\n" {
				t.Errorf("--continue does not see the first command's changes: %q", r.stdout)
			}
			if m := summaryID.FindStringSubmatch(r.stderr); m == nil || m[1] != id {
				t.Errorf("--continue made another change set:\n%s", r)
			}
			if ls := run("changes", "ls", "-q"); strings.TrimSpace(ls.stdout) != id {
				t.Errorf("hutch changes ls -q: %q, want %s", ls.stdout, id)
			}

			wantOK(t, run("changes", "apply", id))
			for name, want := range map[string]string{"keep.txt": "keep\n", "edit.txt": "one\ntwo\n", "new.txt": "new\nmore\n"} {
				p := filepath.Join(ws, name)
				b, err := os.ReadFile(p)
				if err != nil || string(b) != want {
					t.Errorf("after apply, %s: %q, %v; want %q", name, b, err, want)
					continue
				}
				fi, _ := os.Stat(p)
				if st := fi.Sys().(*syscall.Stat_t); st.Uid != uint32(owner) || st.Gid != uint32(owner) {
					t.Errorf("after apply, %s belongs to %d:%d, want the workspace owner %d", name, st.Uid, st.Gid, owner)
				}
			}
			if _, err := os.Stat(filepath.Join(ws, "gone.txt")); !os.IsNotExist(err) {
				t.Errorf("after apply, gone.txt: %v", err)
			}

			// Nothing changed: no change set kept.
			r = run(append([]string{"run", "--review"}, sh("cat keep.txt >/dev/null")...)...)
			wantOK(t, r)
			if !strings.Contains(r.stderr, "changed nothing") {
				t.Errorf("a run that changed nothing:\n%s", r)
			}
			if ls := run("changes", "ls", "-q"); strings.TrimSpace(ls.stdout) != id {
				t.Errorf("after a run that changed nothing, hutch changes ls -q: %q, want only %s", ls.stdout, id)
			}
		})
	}
}

// TestReviewRefused: the front ends that keep no change set refuse review
// mode rather than let the sandbox write the user's files (S2): hutch run
// under the gVisor tier, hutch mcp wrap and hutch create; and
// --continue of an unknown set names it.
func TestReviewRefused(t *testing.T) {
	testutil.RequireRoot(t)
	ws := t.TempDir()
	env := append(baseEnv(ws), "XDG_STATE_HOME="+t.TempDir())
	for _, tt := range []struct {
		args []string
		want string
	}{
		{append([]string{"run", "--review", "--tier", "gvisor"}, sh("true")...), `"review" is not yet supported under tier "gvisor"`},
		{[]string{"mcp", "wrap", "--review", "--", "true"}, "review mode"},
		{[]string{"create", "--review"}, "review mode"},
		{append([]string{"run", "--continue", "abcdef"}, sh("true")...), "change set abcdef: unknown ID"},
	} {
		r := hutch(t, invocation{args: tt.args, dir: ws, env: env})
		if r.code == 0 || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("hutch %q: want a refusal naming %q, got %s", tt.args, tt.want, r)
		}
	}
}

// TestRunReviewImage: review mode in a sandbox from an image, started by
// root and by a user: the workspace at /workspace is the copy, the user's
// files do not change, and the change set holds what the command wrote
// there (and nothing of what it wrote to the image's root).
func TestRunReviewImage(t *testing.T) {
	testutil.RequireRoot(t)
	tar := busyboxImageTar(t, "hutch.test/bb:1")
	for _, uid := range []int{0, testutil.UnprivilegedUID} {
		t.Run(map[bool]string{true: "root", false: "user"}[uid == 0], func(t *testing.T) {
			state, ws, xdg := hostDir(t), testutil.OwnedDir(t, uid), hostDir(t)
			for _, d := range []string{state, xdg} {
				if err := os.Chown(d, uid, uid); err != nil {
					t.Fatal(err)
				}
			}
			wantOK(t, hutch(t, invocation{uid: uid, dir: ws, args: []string{"image", "import", tar, "--state-dir", state}}))
			p := filepath.Join(ws, "f.txt")
			writeFile(t, p, "one\n", 0o644)
			if err := os.Chown(p, uid, uid); err != nil {
				t.Fatal(err)
			}
			env := append(baseEnv(ws), "XDG_STATE_HOME="+xdg)
			r := hutch(t, invocation{uid: uid, dir: ws, env: env, args: []string{"run", "--review", "--image", "hutch.test/bb:1", "--state-dir", state, "--",
				"sh", "-c", "pwd; echo two >> f.txt; echo new > n.txt; echo root > /etc/in-root; cat f.txt"}})
			wantOK(t, r)
			if r.stdout != "/workspace\none\ntwo\n" {
				t.Errorf("the command's view: %q", r.stdout)
			}
			if b, _ := os.ReadFile(p); string(b) != "one\n" {
				t.Errorf("the workspace changed: %q", b)
			}
			m := summaryID.FindStringSubmatch(r.stderr)
			if m == nil || !strings.Contains(r.stderr, "1 added, 1 modified") {
				t.Fatalf("the change set:\n%s", r)
			}
			show := hutch(t, invocation{uid: uid, dir: ws, env: env, args: []string{"changes", "show", m[1], "--name-only"}})
			if got := strings.Fields(show.stdout); strings.Join(got, " ") != "f.txt n.txt" {
				t.Errorf("hutch changes show --name-only: %q", show.stdout)
			}
		})
	}
}

// TestChangeSetsClosed: the change sets are closed to every sandbox,
// wherever $XDG_STATE_HOME puts them — here inside the workspace itself:
// a later command can neither read a set (another project's work, its
// bases) nor write into one (what a person would then apply as reviewed).
func TestChangeSetsClosed(t *testing.T) {
	testutil.RequireRoot(t)
	ws := t.TempDir()
	env := append(baseEnv(ws), "XDG_STATE_HOME="+filepath.Join(ws, ".xdg"))
	r := hutch(t, invocation{dir: ws, env: env, args: append([]string{"run", "--review"}, sh("echo secret-work > w.txt")...)})
	wantOK(t, r)
	m := summaryID.FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("no change set:\n%s", r)
	}
	set := filepath.Join(".xdg", "hutch", "changes", m[1])
	r = hutch(t, invocation{dir: ws, env: env, args: append([]string{"run"}, sh(
		"cat "+set+"/upper/w.txt "+set+"/meta.json 2>/dev/null && echo READ; echo evil > "+set+"/upper/evil 2>/dev/null && echo WROTE; echo control > c.txt && echo CONTROL")...)})
	if strings.Contains(r.stdout, "READ") || strings.Contains(r.stdout, "WROTE") || !strings.Contains(r.stdout, "CONTROL") {
		t.Errorf("a sandbox reached the change sets (want only the control):\n%s", r)
	}
	if _, err := os.Stat(filepath.Join(ws, set, "upper", "evil")); !os.IsNotExist(err) {
		t.Errorf("a file was planted in the change set: %v", err)
	}
}
