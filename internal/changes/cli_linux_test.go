package changes

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestKillDuringApply kills hutch changes apply (SIGKILL) while it writes
// a set of many files: every file is then old or new, never anything
// else, and the next apply completes the set and leaves no temporary
// file.
func TestKillDuringApply(t *testing.T) {
	hutch := testutil.Hutch(t)
	const n = 800
	files := map[string]string{}
	for i := range n {
		files[fmt.Sprintf("d%02d/f%04d", i%30, i)] = strings.Repeat(fmt.Sprintf("old %d\n", i), 1000)
	}
	ws := workspace(t, files)
	s := review(t, ws, `for f in d*/f*; do sed -i 's/^old/new/' "$f"; done`)
	env := append(os.Environ(), "XDG_STATE_HOME="+filepath.Dir(filepath.Dir(filepath.Dir(s.Dir()))))
	old := func(i int) string { return strings.Repeat(fmt.Sprintf("old %d\n", i), 1000) }
	newer := func(i int) string { return strings.Repeat(fmt.Sprintf("new %d\n", i), 1000) }

	cmd := exec.Command(hutch, "changes", "apply", s.ID()[:6])
	cmd.Env = env
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill it once the first file is new.
	first := filepath.Join(ws, "d00/f0000")
	testutil.Eventually(60e9, func() bool {
		b, _ := os.ReadFile(first)
		return string(b) == newer(0)
	})
	cmd.Process.Kill()
	cmd.Wait()
	nOld, nNew := 0, 0
	for i := range n {
		b, err := os.ReadFile(filepath.Join(ws, fmt.Sprintf("d%02d/f%04d", i%30, i)))
		switch {
		case err != nil:
			t.Fatal(err)
		case string(b) == old(i):
			nOld++
		case string(b) == newer(i):
			nNew++
		default:
			t.Fatalf("file %d is neither old nor new: %q…", i, b[:min(len(b), 40)])
		}
	}
	t.Logf("killed with %d files new, %d old", nNew, nOld)
	if nOld == 0 {
		t.Log("the apply ended before the kill: nothing interrupted")
	}
	out, _ := exec.Command("sh", "-c", `find "$1" -name '*.hutch-apply-*'`, "sh", ws).Output()
	t.Logf("temporary files after the kill: %d", bytes.Count(out, []byte("\n")))

	again := exec.Command(hutch, "changes", "apply", s.ID())
	again.Env = env
	if out, err := again.CombinedOutput(); err != nil {
		t.Fatalf("apply after the kill: %v\n%s", err, out)
	}
	for i := range n {
		if b, _ := os.ReadFile(filepath.Join(ws, fmt.Sprintf("d%02d/f%04d", i%30, i))); string(b) != newer(i) {
			t.Fatalf("file %d not new after the second apply", i)
		}
	}
	if out, err := exec.Command("sh", "-c", `find "$1" -name '*.hutch-apply-*'`, "sh", ws).Output(); err != nil || len(out) > 0 {
		t.Errorf("temporary files left: %v %s", err, out)
	}
}

// TestCLI runs hutch changes ls, show, export, apply and discard.
func TestCLI(t *testing.T) {
	hutch := testutil.Hutch(t)
	ws := workspace(t, map[string]string{"a": "a\n", ".envrc": "x\n"})
	s := review(t, ws, `echo b >> a; echo new > n; echo evil >> .envrc`)
	env := append(os.Environ(), "XDG_STATE_HOME="+filepath.Dir(filepath.Dir(filepath.Dir(s.Dir()))))
	run := func(want int, args ...string) (string, string) {
		t.Helper()
		cmd := exec.Command(hutch, append([]string{"changes"}, args...)...)
		cmd.Env = env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		cmd.Run()
		if got := cmd.ProcessState.ExitCode(); got != want {
			t.Fatalf("hutch changes %v: exit %d, want %d\n%s%s", args, got, want, stdout.String(), stderr.String())
		}
		return stdout.String(), stderr.String()
	}
	if out, _ := run(0, "ls", "-q"); out != s.ID()+"\n" {
		t.Errorf("ls -q: %q", out)
	}
	if out, _ := run(0, "ls"); !strings.Contains(out, ws) || !strings.Contains(out, "1 added, 2 modified") || !strings.Contains(out, "to review") {
		t.Errorf("ls:\n%s", out)
	}
	if out, _ := run(0, "show", s.ID()[:5], "--stat"); !strings.Contains(out, " 3 files changed, 3 insertions(+)") {
		t.Errorf("show --stat:\n%s", out)
	}
	if out, _ := run(0, "show", "--name-only", s.ID()[:5], "a", "n"); out != "a\nn\n" {
		t.Errorf("show --name-only a n: %q", out)
	}
	if out, _ := run(0, "show", s.ID(), "--color=always", "a"); !strings.Contains(out, "\x1b[32m+b\x1b[m") {
		t.Errorf("show --color=always: %q", out)
	}
	if _, errOut := run(1, "show", "ffffff"); !strings.Contains(errOut, "unknown ID") {
		t.Errorf("show unknown: %s", errOut)
	}
	if out, _ := run(0, "export", s.ID()); !strings.Contains(out, "diff --git a/n b/n\nnew file mode 100644\n") {
		t.Errorf("export:\n%s", out)
	}
	if _, errOut := run(1, "apply", s.ID()); !strings.Contains(errOut, ".envrc: protected name .envrc") || !strings.Contains(errOut, "--skip-refused") {
		t.Errorf("apply without --allow: %s", errOut)
	}
	if out, _ := run(0, "apply", s.ID(), "--allow", ".envrc"); !strings.Contains(out, "applied 3 paths") {
		t.Errorf("apply --allow: %s", out)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, ".envrc")); string(b) != "x\nevil\n" {
		t.Errorf(".envrc: %q", b)
	}
	if out, _ := run(0, "ls"); !strings.Contains(out, "applied") {
		t.Errorf("ls after apply:\n%s", out)
	}
	run(0, "discard", s.ID())
	if out, _ := run(0, "ls", "-q"); out != "" {
		t.Errorf("ls -q after discard: %q", out)
	}
}
