package cli

import (
	"bytes"
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"
)

// execFlags is a flag set shaped as hutch exec's.
func execFlags() (*flag.FlagSet, *bool, *bool, *List) {
	fs := flag.NewFlagSet("hutch exec", flag.ContinueOnError)
	i := fs.Bool("i", false, "stdin")
	t := fs.Bool("t", false, "terminal")
	var env List
	fs.Var(&env, "env", "`NAME=VALUE`")
	fs.String("cwd", "", "dir")
	fs.Duration("timeout", 0, "timeout")
	return fs, i, t, &env
}

func TestSplitShort(t *testing.T) {
	for _, tt := range []struct{ in, want []string }{
		{[]string{"-it", "ID", "--", "sh"}, []string{"-i", "-t", "ID", "--", "sh"}},
		{[]string{"-ti", "ID"}, []string{"-t", "-i", "ID"}},
		{[]string{"-i", "-t", "ID"}, []string{"-i", "-t", "ID"}},
		// A value that looks like flags is a value.
		{[]string{"--env", "-it", "ID"}, []string{"--env", "-it", "ID"}},
		{[]string{"-cwd", "-it", "-it"}, []string{"-cwd", "-it", "-i", "-t"}},
		// After the flags, nothing is touched.
		{[]string{"ID", "-it"}, []string{"ID", "-it"}},
		{[]string{"--", "-it"}, []string{"--", "-it"}},
		// Not all letters are boolean flags, or written as a long flag:
		// left for package flag to report.
		{[]string{"-ix"}, []string{"-ix"}},
		{[]string{"--it"}, []string{"--it"}},
		{[]string{"-it=true"}, []string{"-it=true"}},
		{[]string{"-h"}, []string{"-h"}},
	} {
		fs, _, _, _ := execFlags()
		if got := SplitShort(fs, tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("SplitShort(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestParseCombined(t *testing.T) {
	fs, i, tt, env := execFlags()
	var stderr bytes.Buffer
	if err := Parse(fs, []string{"-ti", "--env", "A=b", "ID", "--", "sh"}, &stderr); err != nil {
		t.Fatal(err, stderr.String())
	}
	if !*i || !*tt || !slices.Equal(*env, []string{"A=b"}) || !slices.Equal(fs.Args(), []string{"ID", "--", "sh"}) {
		t.Errorf("i=%v t=%v env=%q args=%q", *i, *tt, *env, fs.Args())
	}
}

func TestParseErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--tmeout", "1s"}, `hutch exec: unknown flag --tmeout; did you mean --timeout? ("hutch exec -h" lists every flag)` + "\n"},
		{[]string{"--ev", "A=b"}, `hutch exec: unknown flag --ev; did you mean --env? ("hutch exec -h" lists every flag)` + "\n"},
		{[]string{"-x"}, `hutch exec: unknown flag -x ("hutch exec -h" lists every flag)` + "\n"},
		{[]string{"--frobnicate"}, `hutch exec: unknown flag --frobnicate ("hutch exec -h" lists every flag)` + "\n"},
		// As typed: one dash or two.
		{[]string{"-ix"}, `hutch exec: unknown flag -ix; did you mean -i? ("hutch exec -h" lists every flag)` + "\n"},
		{[]string{"-tmeout=1s"}, `hutch exec: unknown flag -tmeout; did you mean --timeout? ("hutch exec -h" lists every flag)` + "\n"},
		{[]string{"--env"}, `hutch exec: --env needs a value ("hutch exec -h" lists every flag)` + "\n"},
		{[]string{"--timeout", "soon"}, `hutch exec: --timeout: invalid value "soon": parse error ("hutch exec -h" lists every flag)` + "\n"},
	} {
		fs, _, _, _ := execFlags()
		usage := false
		fs.Usage = func() { usage = true }
		var stderr bytes.Buffer
		err := Parse(fs, tt.args, &stderr)
		if !errors.Is(err, ErrUsage) || stderr.String() != tt.want || usage {
			t.Errorf("Parse(%q): %v, usage printed %v, stderr:\n%q\nwant:\n%q", tt.args, err, usage, stderr.String(), tt.want)
		}
	}
}

func TestParseHelp(t *testing.T) {
	fs, _, _, _ := execFlags()
	var out bytes.Buffer
	fs.SetOutput(&out)
	fs.Usage = func() { out.WriteString("Usage: hutch exec\n") }
	var stderr bytes.Buffer
	if err := Parse(fs, []string{"-h"}, &stderr); !errors.Is(err, flag.ErrHelp) || out.String() != "Usage: hutch exec\n" || stderr.Len() != 0 {
		t.Errorf("-h: %v, usage %q, stderr %q", err, out.String(), stderr.String())
	}
	// The flag set's output is restored for later use.
	fs.PrintDefaults()
	if !strings.Contains(out.String(), "-timeout") {
		t.Errorf("output not restored: %q", out.String())
	}
}

func TestClosest(t *testing.T) {
	run := []string{"allow-cidr", "allow-domain", "allow-private", "allow-read", "allow-write", "memory", "net", "pids", "policy", "upstream-ca", "workspace"}
	for _, tt := range []struct {
		in   string
		want []string
	}{
		{"alow-write", []string{"allow-write"}},
		{"memroy", []string{"memory"}},
		{"polcy", []string{"policy"}},
		{"allow", []string{"allow-cidr", "allow-domain", "allow-private"}},
		{"upstream-cas", []string{"upstream-ca"}},
		{"nett", []string{"net"}},
		{"xyz", nil},
		{"n", nil},
	} {
		if got := Closest(tt.in, run); !slices.Equal(got, tt.want) {
			t.Errorf("Closest(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestDistance(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		d    int
	}{
		{"", "", 0}, {"a", "", 1}, {"exec", "exce", 1}, {"memory", "memroy", 1}, {"kitten", "sitting", 3}, {"ls", "rm", 2},
	} {
		if d := distance(tt.a, tt.b); d != tt.d {
			t.Errorf("distance(%q, %q) = %d, want %d", tt.a, tt.b, d, tt.d)
		}
	}
}
