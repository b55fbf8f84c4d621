// Package cli holds the command-line conventions that hutch's binaries
// share: how flags are parsed and how a bad command line is reported.
//
// Parse accepts what users of docker and git type: one-letter boolean
// flags combined in one argument ("-it" for "-i -t"), and both "-flag" and
// "--flag". A bad command line is reported in one line, never with the
// whole usage: an unknown flag is named with the known flags closest to
// it, and the line says how to see them all. Only -h or --help prints the
// usage.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// ErrUsage is what Parse returns after a command line it reported as bad.
var ErrUsage = errors.New("bad command line")

// List is a repeatable flag: every occurrence adds its value.
type List []string

// String returns the values, comma-separated.
func (l *List) String() string { return strings.Join(*l, ",") }

// Set adds v.
func (l *List) Set(v string) error { *l = append(*l, v); return nil }

// Parse parses args with fs, whose name is the command as users type it
// ("hutch exec"). It returns nil when the flags are good, flag.ErrHelp
// after -h or --help (once fs.Usage printed the usage), and ErrUsage after
// a bad command line, which it reported on stderr in one line.
func Parse(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(SplitShort(fs, args))
	fs.Usage = usage
	fs.SetOutput(out)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		if usage != nil {
			usage()
		} else {
			fs.PrintDefaults()
		}
		return flag.ErrHelp
	}
	fmt.Fprintf(stderr, "%s: %s (%q lists every flag)\n", fs.Name(), explain(fs, err, args), fs.Name()+" -h")
	return ErrUsage
}

// explain rewords an error of package flag for users, naming the flags
// closest to an unknown one.
func explain(fs *flag.FlagSet, err error, args []string) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		name = strings.TrimLeft(name, "-")
		s := fmt.Sprintf("unknown flag %s", typed(name, args))
		if near := Closest(name, Names(fs)); len(near) > 0 {
			for i, n := range near {
				near[i] = Dashed(n)
			}
			s += "; did you mean " + orList(near) + "?"
		}
		return s
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		return Dashed(strings.TrimLeft(name, "-")) + " needs a value"
	}
	// invalid value "V" for flag -NAME: WHY, and invalid boolean value "V"
	// for -NAME: WHY
	for _, p := range []string{"invalid value ", "invalid boolean value "} {
		rest, ok := strings.CutPrefix(msg, p)
		if !ok {
			continue
		}
		i := strings.Index(rest, " for ")
		if i < 0 {
			break
		}
		value, rest := rest[:i], strings.TrimPrefix(rest[i+len(" for "):], "flag ")
		name, why, _ := strings.Cut(rest, ": ")
		return fmt.Sprintf("%s: invalid value %s: %s", Dashed(strings.TrimLeft(name, "-")), value, why)
	}
	return msg
}

// typed is the flag name as args wrote it: with one dash or two.
func typed(name string, args []string) string {
	for _, a := range args {
		if a == "--" {
			break
		}
		if n, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "="); n == name && strings.HasPrefix(a, "-") {
			return a[:len(a)-len(strings.TrimLeft(a, "-"))] + name
		}
	}
	return Dashed(name)
}

// Dashed is how a flag is written in hutch's messages: -x for one letter,
// --name otherwise.
func Dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// orList joins words as "a", "a or b", "a, b or c".
func orList(words []string) string {
	if len(words) == 1 {
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// Names returns the names of fs's flags, sorted.
func Names(fs *flag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return names
}

// boolFlag is the interface of package flag's boolean flags.
type boolFlag interface{ IsBoolFlag() bool }

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(boolFlag)
	return ok && b.IsBoolFlag()
}

// SplitShort returns args with every argument that combines one-letter
// boolean flags of fs ("-it") split into one argument each ("-i", "-t").
// It looks only at the flags, as package flag parses them: it stops at
// "--" and at the first argument that is not a flag, and it skips the
// value of a flag that takes one. An argument that names a flag of its own
// is left as it is, as is one with a letter that is not a boolean flag
// (package flag then reports it).
func SplitShort(fs *flag.FlagSet, args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || len(a) < 2 || a[0] != '-' {
			return append(out, args[i:]...)
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if f := fs.Lookup(name); f != nil {
			out = append(out, a)
			if !hasValue && !isBool(f) && i+1 < len(args) {
				i++
				out = append(out, args[i])
			}
			continue
		}
		if a[1] == '-' || hasValue || !allShortBools(fs, name) {
			out = append(out, a)
			continue
		}
		for _, c := range name {
			out = append(out, "-"+string(c))
		}
	}
	return out
}

// allShortBools reports whether every letter of s is a one-letter boolean
// flag of fs.
func allShortBools(fs *flag.FlagSet, s string) bool {
	if len(s) < 2 {
		return false
	}
	for _, c := range s {
		f := fs.Lookup(string(c))
		if f == nil || !isBool(f) {
			return false
		}
	}
	return true
}

// Closest returns the words nearest to s, nearest first, at most three:
// those within a few edits of it (a swap of two neighbouring letters is
// one edit), and those that begin with it when it is at least two
// letters long. It returns none for a word too far from every one.
func Closest(s string, words []string) []string {
	type cand struct {
		w string
		d int
	}
	limit := 1
	switch {
	case len(s) <= 1:
		limit = 0
	case len(s) >= 10:
		limit = 3
	case len(s) >= 6:
		limit = 2
	}
	var cs []cand
	for _, w := range words {
		d := distance(strings.ToLower(s), strings.ToLower(w))
		switch {
		case d <= limit && d > 0:
		case len(s) >= 2 && strings.HasPrefix(w, s) && w != s:
			d = limit + 1 // after the near misses
		default:
			continue
		}
		cs = append(cs, cand{w, d})
	}
	slices.SortStableFunc(cs, func(a, b cand) int {
		if a.d != b.d {
			return a.d - b.d
		}
		return strings.Compare(a.w, b.w)
	})
	var out []string
	for _, c := range cs[:min(len(cs), 3)] {
		out = append(out, c.w)
	}
	return out
}

// distance is the number of edits (insert, delete, replace a letter, or
// swap two neighbouring ones) that turn a into b.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}

// DefaultStateDir is where hutch serve keeps its state unless told
// otherwise (--state-dir).
const DefaultStateDir = "/var/lib/hutch"
