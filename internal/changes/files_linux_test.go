package changes

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/approve"
)

// TestApplyFileRules: the paths a review-mode run touched (modified,
// added, renamed: both names, a mode change, a symbolic link, a deletion)
// are matched against approvals.files: a deny rule refuses the apply, an
// ask rule asks the gate, and a refused or unanswerable question refuses
// it; a refused apply leaves the workspace as it was. Allowed, the apply
// writes.
func TestApplyFileRules(t *testing.T) {
	ws := workspace(t, map[string]string{
		"Makefile": "all:\n", "main.go": "package main\n", "old.pem": "key\n",
		"run.sh": "echo\n", "gone.txt": "x\n", ".git/hooks/": "",
	})
	s := review(t, ws, `echo 'all: evil' > Makefile
mkdir -p .github/workflows && echo on > .github/workflows/ci.yml
mv old.pem certs.pem
chmod 755 run.sh
ln -s main.go link.go
rm gone.txt
echo hook > .git/hooks/pre-commit`)
	ch, err := s.Changes()
	if err != nil {
		t.Fatal(err)
	}
	before := tree(t, ws)
	untouched := func(what string) {
		t.Helper()
		if got := tree(t, ws); !reflect.DeepEqual(got, before) {
			t.Errorf("%s: the workspace changed:\n got %v\nwant %v", what, got, before)
		}
	}
	ask := func(a approve.Answer, seen *[]approve.Request) *approve.Gate {
		return &approve.Gate{Asker: approve.AskerFunc(func(_ context.Context, r approve.Request) approve.Reply {
			*seen = append(*seen, r)
			return approve.Reply{Answer: a, By: "test"}
		})}
	}
	allowGit := []string{".git"} // a protected name: the user's word, before the rules

	// A deny rule the set records refuses, whatever the gate would say.
	if err := s.SetFileRules([]approve.FileRule{{Action: approve.Deny, Globs: []string{".git/hooks/**"}, Source: "p.yaml:4"}}); err != nil {
		t.Fatal(err)
	}
	var seen []approve.Request
	_, err = s.Apply(ch, ApplyOptions{Allow: allowGit, Gate: ask(approve.AnswerOnce, &seen)})
	var ae *ApplyError
	if !errors.As(err, &ae) || len(ae.Denied) != 1 || ae.Denied[0].Path != ".git/hooks/pre-commit" ||
		!strings.Contains(err.Error(), `1 path denied by approvals.files deny: [".git/hooks/**"] (p.yaml:4), nothing applied`) {
		t.Fatalf("apply with a deny rule: %v", err)
	}
	if len(seen) != 0 {
		t.Errorf("asked %v, though a deny rule decided", seen)
	}
	untouched("denied")

	// The set's rules survive reopening it; an ask rule of the apply asks
	// about every path it matches, both names of a rename included.
	st := NewStore(filepath.Dir(s.Dir()))
	s, err = st.Open(s.ID())
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Meta().FileRules; len(got) != 1 || got[0].Action != approve.Deny {
		t.Fatalf("the set's rules after reopening: %+v", got)
	}
	askRules := []approve.FileRule{
		{Action: approve.Ask, Globs: []string{"Makefile", "**/*.pem", ".github/**", "run.sh", "link.go", "gone.txt"}, Source: "p.yaml:3"},
		{Action: approve.Allow, Globs: []string{".github/workflows/ci.yml"}},
	}
	seen = nil
	opt := ApplyOptions{Paths: []string{"Makefile", "certs.pem", ".github", "run.sh", "link.go", "gone.txt"}, Files: askRules}
	for _, tt := range []struct {
		name string
		gate *approve.Gate
		want string
	}{
		{"refused", ask(approve.AnswerDeny, &seen), "refused by test"},
		{"no one to ask", &approve.Gate{NoAsker: "no terminal to ask on"}, "refused: no terminal to ask on"},
		{"no gate", nil, "refused: no one to ask"},
	} {
		o := opt
		o.Gate = tt.gate
		_, err = s.Apply(ch, o)
		if !errors.As(err, &ae) || !errors.Is(err, approve.ErrDenied) || len(ae.NotApproved) != 8 || !strings.Contains(err.Error(), tt.want) ||
			!strings.Contains(err.Error(), "8 paths not approved under approvals.files ask:") {
			t.Errorf("%s: %v", tt.name, err)
		}
		untouched(tt.name)
	}
	if len(seen) != 1 || seen[0].Kind != approve.KindFile || seen[0].Subject != ".github\n.github/workflows\nMakefile\nold.pem\ncerts.pem\ngone.txt\nlink.go\nrun.sh" ||
		!strings.HasPrefix(seen[0].Rule, `approvals.files ask: ["Makefile"`) {
		t.Errorf("the question: %+v", seen)
	}

	// Allowed: written.
	seen = nil
	o := opt
	o.Gate = ask(approve.AnswerOnce, &seen)
	res, err := s.Apply(ch, o)
	if err != nil || len(seen) != 1 {
		t.Fatalf("apply, allowed: %v (asked %d times)", err, len(seen))
	}
	if len(res.Applied) != 9 {
		t.Errorf("applied %q", res.Applied)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "Makefile")); string(b) != "all: evil\n" {
		t.Errorf("Makefile after the apply: %q", b)
	}
	if _, err := os.Stat(filepath.Join(ws, ".git/hooks/pre-commit")); !os.IsNotExist(err) {
		t.Errorf("the denied hook was written: %v", err)
	}
}
