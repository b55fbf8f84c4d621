package gitmeta

import (
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	in := "\xef\xbb\xbf# a comment\n" +
		"[core]\n" +
		"\trepositoryformatversion = 0\n" +
		"\tbare\n" +
		"\tFSMonitor = \"./tools/watch \\\"x\\\"\" ; trailing comment\n" +
		"[remote \"Origin\"]\n" +
		"\turl = https://example.test/r.git   \n" +
		"[branch.Main] merge = refs/heads/main\n" +
		"[alias]\n" +
		"\tlg = log \\\n\t--oneline # continued\n" +
		"\tq = \"a # b\" c\\td\n"
	vars, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range vars {
		got = append(got, v.Key()+"="+v.Value)
	}
	want := []string{
		"core.repositoryformatversion=0",
		"core.bare=",
		`core.fsmonitor=./tools/watch "x"`,
		"remote.Origin.url=https://example.test/r.git",
		"branch.main.merge=refs/heads/main",
		"alias.lg=log  --oneline",
		"alias.q=a # b c\td",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse:\n got %q\nwant %q", got, want)
	}
	if !vars[1].NoValue || vars[0].NoValue {
		t.Error("NoValue wrong")
	}
	if vars[2].Line != 5 {
		t.Errorf("line of fsmonitor = %d, want 5", vars[2].Line)
	}
}

func TestParseErrors(t *testing.T) {
	for _, in := range []string{
		"x = 1\n",                            // outside a section
		"[core\n",                            // unterminated header
		"[core]\nx = \"open\n",               // newline in quotes
		"[core]\nx = a\\q\n",                 // bad escape
		"[co re]\n",                          // space in a name without a subsection
		"[a \"b]\n",                          // unterminated subsection
		"[core]\n=1\n",                       // no name
		"[core]\nx y\n",                      // junk after a name
		"[core]\nx = a\\",                    // backslash at the end
		strings.Repeat("#", MaxConfigSize+1), // too large
	} {
		if _, err := Parse([]byte(in)); err == nil {
			t.Errorf("Parse(%.40q) accepted a file git refuses", in)
		}
	}
}

func TestPaths(t *testing.T) {
	parse := func(s string) Var {
		vars, err := Parse([]byte(s))
		if err != nil || len(vars) != 1 {
			t.Fatalf("Parse(%q) = %v, %v", s, vars, err)
		}
		return vars[0]
	}
	for _, tc := range []struct {
		in   string
		path string
		kind PathKind
	}{
		{"[core]\nhooksPath = .githooks", ".githooks", Dir},
		{"[init]\ntemplateDir = ~/tpl", "~/tpl", Dir},
		{"[include]\npath = ../shared.inc", "../shared.inc", Include},
		{"[includeIf \"gitdir:~/w/\"]\npath = w.inc", "w.inc", Include},
		{"[core]\nfsmonitor = .git/hooks/fsmonitor-watchman", ".git/hooks/fsmonitor-watchman", Program},
		{"[core]\nsshCommand = \"'./bin/my ssh' -v\"", "./bin/my ssh", Program},
		{"[filter \"lfs\"]\nclean = ./scripts/clean.sh %f", "./scripts/clean.sh", Program},
		{"[credential]\nhelper = !./h.sh;x", "./h.sh", Program},
		{"[alias]\nx = !tools/run", "tools/run", Program},
		{"[diff \"png\"]\ntextconv = /opt/bin/conv", "/opt/bin/conv", Program},
	} {
		refs := Paths(parse(tc.in))
		if len(refs) != 1 || refs[0].Path != tc.path || refs[0].Kind != tc.kind {
			t.Errorf("Paths(%q) = %+v, want %q kind %d", tc.in, refs, tc.path, tc.kind)
		}
	}
	for _, in := range []string{
		"[core]\nfsmonitor = true",  // git's own daemon
		"[core]\npager = less -R",   // from PATH
		"[remote \"o\"]\nurl = ./x", // not a command
		"[core]\nhooksPath",         // no value
		"[alias]\nst = status",      // a git command
	} {
		if refs := Paths(parse(in)); len(refs) != 0 {
			t.Errorf("Paths(%q) = %+v, want none", in, refs)
		}
	}
}

func TestSafeInNewRepository(t *testing.T) {
	cloned := "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n" +
		"[remote \"origin\"]\n\turl = https://example.test/r.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n" +
		"[branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n" +
		"[submodule \"lib\"]\n\turl = ../lib\n\tactive = true\n\tupdate = rebase\n"
	vars, err := Parse([]byte(cloned))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vars {
		if !SafeInNewRepository(v) {
			t.Errorf("%s from git clone is not safe", v.Key())
		}
	}
	for _, in := range []string{
		"[core]\nfsmonitor = true", "[core]\nfsmonitor = evil", "[core]\nhooksPath = h",
		"[core]\nsshCommand = ssh", "[core]\npager = less", "[filter \"x\"]\nclean = cat",
		"[include]\npath = x", "[includeIf \"onbranch:m\"]\npath = x", "[alias]\nx = !sh",
		"[submodule \"a\"]\nupdate = !sh -c x", "[remote \"o\"]\nuploadpack = ./x",
		"[credential]\nhelper = store", "[gpg]\nprogram = ./g", "[unknown]\nkey = 1",
		"[diff \"x\"]\ntextconv = cat", "[merge \"x\"]\ndriver = ./m", "[pager]\nlog = ./p",
	} {
		vars, err := Parse([]byte(in))
		if err != nil || len(vars) != 1 {
			t.Fatalf("Parse(%q) = %v, %v", in, vars, err)
		}
		if SafeInNewRepository(vars[0]) {
			t.Errorf("%q is safe in a new repository", in)
		}
	}
}

func TestParseGitFile(t *testing.T) {
	if d, err := ParseGitFile([]byte("gitdir: ../.git/modules/x\n")); err != nil || d != "../.git/modules/x" {
		t.Errorf("ParseGitFile = %q, %v", d, err)
	}
	for _, in := range []string{"", "gitdir:\n", "nope: x\n", "gitdir: \n"} {
		if d, err := ParseGitFile([]byte(in)); err == nil && d != "" {
			t.Errorf("ParseGitFile(%q) = %q, want an error", in, d)
		}
	}
}
