//go:build linux

package escape

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// changeSetID finds the change set's id in hutch run --review's summary.
var changeSetID = regexp.MustCompile(`hutch: change set ([0-9a-f]{12}): `)

// TestItem07_ReviewModeWrites: in review mode (hutch run --review) nothing
// the sandbox does reaches the user's files, by any name or call: writes,
// appends, truncation, removal, renames (of files, of a directory, of the
// workspace itself), the workspace by its absolute path and through
// /proc/self/cwd, a symbolic link it makes to the workspace's absolute
// path, a hard link, chmod, utimes. The workspace is byte for byte, mode
// for mode and time for time as before, while the sandbox saw every one of
// its writes (the control). Then what it made that another tool would
// run (pre-commit's configuration, a git hook path) is not applied by
// hutch changes apply without --allow: apply refuses and writes nothing;
// with --skip-refused the rest is applied and those are still left out.
func TestItem07_ReviewModeWrites(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		files := map[string]string{"a.txt": "a\n", "d/b.txt": "b\n", "d/c.txt": "c\n", "keep.txt": "keep\n", "big.txt": strings.Repeat("z", 4096)}
		for name, content := range files {
			p := filepath.Join(sb.ws, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := filepath.Walk(sb.ws, func(p string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, sb.mode.uid, sb.mode.uid)
		}); err != nil {
			t.Fatal(err)
		}
		old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
		if err := os.Chtimes(filepath.Join(sb.ws, "keep.txt"), old, old); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, sb.ws)
		script := `ws=$PWD
echo x > a.txt
echo y >> d/b.txt
rm d/c.txt
: > big.txt
echo abs > "$ws/abs.txt"
echo proc > /proc/self/cwd/proc.txt
ln -s "$ws/a.txt" sl && echo via-link > sl
ln keep.txt hard && echo via-hard >> hard
chmod 600 keep.txt
touch -d 2020-01-01 keep.txt
mv d e
mv "$ws" "$ws.moved" 2>/dev/null || echo cannot-move-workspace
echo 'repos: []' > .pre-commit-config.yaml
(mkdir -p sub/.git/hooks && echo evil > sub/.git/hooks/pre-commit) 2>/dev/null
echo "SEEN $(cat a.txt) $(cat abs.txt) $(cat proc.txt) $(cat sl) $(tail -n1 keep.txt) $(test -e d || echo d-gone) $(cat e/b.txt | tr '\n' ' ')$(wc -c < big.txt)"`
		r := sb.run(opts{flags: []string{"--review"}}, script)
		t.Log(r)
		if r.code != 0 || !strings.Contains(r.stdout, "SEEN via-link abs proc via-link via-hard d-gone b y 0") {
			t.Fatalf("the control: the sandbox must see its own writes in review mode\n%s", r)
		}
		sameTree(t, sb.ws, before)
		if fi, err := os.Stat(filepath.Join(sb.ws, "keep.txt")); err != nil || !fi.ModTime().Equal(old) {
			t.Errorf("keep.txt's time on the host changed: %v, %v", fi.ModTime(), err)
		}
		m := changeSetID.FindStringSubmatch(r.stderr)
		if m == nil {
			t.Fatalf("no change set named:\n%s", r)
		}
		id := m[1]

		// What another tool would run is not applied without the user's word.
		r = sb.hutch(opts{noCheck: true}, "changes", "apply", id)
		if r.code == 0 || !strings.Contains(r.stderr+r.stdout, ".pre-commit-config.yaml") {
			t.Errorf("hutch changes apply without --allow: want a refusal naming .pre-commit-config.yaml\n%s", r)
		}
		sameTree(t, sb.ws, before)
		r = sb.hutch(opts{noCheck: true}, "changes", "apply", id, "--skip-refused")
		if r.code != 0 {
			t.Fatalf("hutch changes apply --skip-refused:\n%s", r)
		}
		if b, err := os.ReadFile(filepath.Join(sb.ws, "a.txt")); err != nil || string(b) != "via-link\n" {
			t.Errorf("after apply, a.txt: %q, %v", b, err)
		}
		for _, p := range []string{".pre-commit-config.yaml", "sub/.git/hooks/pre-commit"} {
			if _, err := os.Lstat(filepath.Join(sb.ws, p)); !os.IsNotExist(err) {
				t.Errorf("apply wrote %s without --allow (%v)", p, err)
			}
		}
	})
}
