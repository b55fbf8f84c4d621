package main

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestFlagErrors: a bad flag, for any command, is reported in one line
// that names it and the closest known flags and says how to see them all;
// never the whole usage. -h still prints the usage, on stderr, exit 0.
func TestFlagErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		code int
		line string
	}{
		{[]string{"run", "--alow-write", "/x", "--", "true"}, 125, `hutch run: unknown flag --alow-write; did you mean --allow-write? ("hutch run -h" lists every flag)`},
		{[]string{"run", "--allow", "/x", "--", "true"}, 125, `hutch run: unknown flag --allow; did you mean --allow-cidr, --allow-domain or --allow-emulation? ("hutch run -h" lists every flag)`},
		{[]string{"run", "-memroy", "1g", "--", "true"}, 125, `hutch run: unknown flag -memroy; did you mean --memory? ("hutch run -h" lists every flag)`},
		{[]string{"run", "--memory"}, 125, `hutch run: --memory needs a value ("hutch run -h" lists every flag)`},
		{[]string{"run", "--pids", "many", "--", "true"}, 125, `hutch run: --pids: invalid value "many": parse error ("hutch run -h" lists every flag)`},
		{[]string{"policy", "show", "--polcy", "x"}, 125, `hutch policy show: unknown flag --polcy; did you mean --policy? ("hutch policy show -h" lists every flag)`},
		{[]string{"create", "--upstream-cas", "x"}, 2, `hutch create: unknown flag --upstream-cas; did you mean --upstream-ca? ("hutch create -h" lists every flag)`},
		{[]string{"exec", "--tmeout", "1s", "ID", "--", "true"}, 125, `hutch exec: unknown flag --tmeout; did you mean --timeout? ("hutch exec -h" lists every flag)`},
		{[]string{"exec", "-ix", "ID", "--", "true"}, 125, `hutch exec: unknown flag -ix; did you mean -i? ("hutch exec -h" lists every flag)`},
		{[]string{"ls", "--lable", "a=b"}, 2, `hutch ls: unknown flag --lable; did you mean --label? ("hutch ls -h" lists every flag)`},
		{[]string{"events", "--snice", "3", "ID"}, 2, `hutch events: unknown flag --snice; did you mean --since? ("hutch events -h" lists every flag)`},
		{[]string{"rm", "-f", "ID"}, 2, `hutch rm: unknown flag -f ("hutch rm -h" lists every flag)`},
		{[]string{"audit", "verify", "--state", "x"}, 2, `hutch audit verify: unknown flag --state; did you mean --state-dir? ("hutch audit verify -h" lists every flag)`},
		{[]string{"serve", "--wram", "2"}, 2, `hutch serve: unknown flag --wram; did you mean --warm? ("hutch serve -h" lists every flag)`},
		{[]string{"token", "create", "--tennant", "a"}, 2, `hutch token create: unknown flag --tennant; did you mean --tenant? ("hutch token create -h" lists every flag)`},
		{[]string{"exce", "ID"}, 2, `hutch: unknown command "exce"; did you mean exec? ("hutch help" lists the commands)`},
	} {
		r := hutch(t, invocation{args: tt.args})
		if r.code != tt.code || r.stderr != tt.line+"\n" || r.stdout != "" {
			t.Errorf("hutch %q: want exit %d and the one line\n%s\ngot %s", tt.args, tt.code, tt.line, r)
		}
	}
	for _, args := range [][]string{{"run", "-h"}, {"exec", "--help"}, {"create", "-h"}, {"serve", "-h"}, {"token", "create", "-h"}} {
		r := hutch(t, invocation{args: args})
		if r.code != 0 || !strings.HasPrefix(r.stderr, "Usage: hutch "+args[0]) || !strings.Contains(r.stderr, "\nFlags:\n") {
			t.Errorf("hutch %q: want the usage and exit 0, got %s", args, r)
		}
	}
}

// flagNames are the flags a command's usage (-h) lists.
func flagNames(t *testing.T, args ...string) []string {
	t.Helper()
	r := hutch(t, invocation{args: append(args, "-h")})
	wantOK(t, r)
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^  -(\S+)`).FindAllStringSubmatch(r.stderr, -1) {
		names = append(names, m[1])
	}
	if len(names) < 5 {
		t.Fatalf("hutch %q -h lists %q", args, names)
	}
	return names
}

// wantRunFlagsAnd fails the test unless the command args takes exactly
// hutch run's flags (run, in their order) and its own (in theirs).
func wantRunFlagsAnd(t *testing.T, run, args []string, own ...string) {
	t.Helper()
	flags := flagNames(t, args...)
	var common, rest []string
	for _, f := range flags {
		if slices.Contains(run, f) {
			common = append(common, f)
		} else {
			rest = append(rest, f)
		}
	}
	if !slices.Equal(common, run) || !slices.Equal(rest, own) {
		t.Errorf("hutch %s takes\n  %q\nhutch run takes\n  %q and %q", strings.Join(args, " "), flags, run, own)
	}
}

// TestRunFlagsEverywhere: hutch create, hutch policy show and hutch mcp
// take exactly hutch run's flags (create adds its own), from one
// definition.
func TestRunFlagsEverywhere(t *testing.T) {
	t.Parallel()
	run := flagNames(t, "run")
	for _, want := range []string{"upstream-ca", "report", "debug", "allow-write", "secret"} {
		if !slices.Contains(run, want) {
			t.Errorf("hutch run lacks --%s: %q", want, run)
		}
	}
	if show := flagNames(t, "policy", "show"); !slices.Equal(show, run) {
		t.Errorf("hutch policy show takes\n  %q\nhutch run takes\n  %q", show, run)
	}
	if m := flagNames(t, "mcp"); !slices.Equal(m, run) {
		t.Errorf("hutch mcp takes\n  %q\nhutch run takes\n  %q", m, run)
	}
	wantRunFlagsAnd(t, run, []string{"create"}, "disk", "idle-timeout", "label", "review-workspace", "snapshot")
	// Every run flag parses for create: the refusal comes from the
	// unanswered daemon, or the flag's own check, not from the parser.
	dir := t.TempDir()
	env := append(baseEnv(dir), "HUTCH_HOST=unix://"+dir+"/none.sock")
	for _, args := range [][]string{
		{"create", "--upstream-ca", "/nonexistent.pem"},
		{"create", "--debug", "--memory", "64m"},
		{"create", "--report", dir + "/r.jsonl"},
		{"create", "--state-dir", dir},
		{"create", "--runsc", "/usr/bin/runsc"},
		{"create", "--gvisor-directfs"},
	} {
		r := hutch(t, invocation{args: args, dir: dir, env: env})
		if r.code == 0 || strings.Contains(r.stderr, "unknown flag") || len(lines(r.stderr)) > 2 {
			t.Errorf("hutch %q: %s", args, r)
		}
	}
	r := hutch(t, invocation{args: []string{"create", "--report", dir + "/r.jsonl"}, dir: dir, env: env})
	if r.code != 2 || !strings.Contains(r.stderr, "hutch events") {
		t.Errorf("create --report: want exit 2 pointing to hutch events, got %s", r)
	}
	r = hutch(t, invocation{args: []string{"create", "--runsc", "/usr/bin/runsc"}, dir: dir, env: env})
	if r.code != 2 || !strings.Contains(r.stderr, "the daemon's") {
		t.Errorf("create --runsc: want exit 2 saying the runtime is the daemon's, got %s", r)
	}
	r = hutch(t, invocation{args: []string{"create", "--gvisor-directfs"}, dir: dir, env: env})
	if r.code != 2 || !strings.Contains(r.stderr, "the daemon's") {
		t.Errorf("create --gvisor-directfs: want exit 2 saying the runtime is the daemon's, got %s", r)
	}
	r = hutch(t, invocation{args: []string{"create", "--state-dir", dir}, dir: dir, env: env})
	if r.code != 2 || !strings.Contains(r.stderr, "the daemon's store") {
		t.Errorf("create --state-dir: want exit 2 pointing to the daemon's store, got %s", r)
	}
	r = hutch(t, invocation{args: []string{"create", "--upstream-ca", "/nonexistent.pem"}, dir: dir, env: env})
	if r.code != 2 || !strings.Contains(r.stderr, "--upstream-ca") {
		t.Errorf("create --upstream-ca of a missing file: %s", r)
	}
}

// TestCombinedShortFlags: one-letter boolean flags combine as in docker
// and git (exec -it, -ti); the command line goes on to the daemon, which
// this test does not run.
func TestCombinedShortFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := append(baseEnv(dir), "HUTCH_HOST=unix://"+dir+"/none.sock")
	for _, args := range [][]string{
		{"exec", "-it", "sb-1", "--", "sh"},
		{"exec", "-ti", "sb-1", "--", "sh"},
		{"exec", "-i", "-t", "--env", "-it=1", "sb-1", "--", "sh"},
		{"ls", "-q"},
	} {
		r := hutch(t, invocation{args: args, dir: dir, env: env})
		if strings.Contains(r.stderr, "flag") || !strings.Contains(r.stderr, "none.sock") {
			t.Errorf("hutch %q: want the flags accepted and the missing daemon reported, got %s", args, r)
		}
	}
}
