package changes

import (
	"fmt"
	"strings"
)

// kindOrder is the order in which kinds are counted and summarised.
var kindOrder = []Kind{Added, Modified, Deleted, Renamed, TypeChanged, Refused}

// isDirAddOrDelete reports whether c adds or removes a directory, whose
// files are changes of their own.
func (c Change) isDirAddOrDelete() bool {
	return (c.Kind == Added && c.New.Type == Dir) || (c.Kind == Deleted && c.Old.Type == Dir)
}

// Count counts changes by kind, leaving out directories added or deleted
// (their files count).
func Count(changes []Change) map[Kind]int {
	n := map[Kind]int{}
	for _, c := range changes {
		if !c.isDirAddOrDelete() {
			n[c.Kind]++
		}
	}
	return n
}

// Delta returns how many bytes of files and links the changes add (less
// when negative).
func Delta(changes []Change) int64 {
	var d int64
	for _, c := range changes {
		if c.New.Type != Dir {
			d += c.New.Size
		}
		if c.Old.Type != Dir {
			d -= c.Old.Size
		}
		if c.From != "" {
			d -= c.FromOld.Size
		}
	}
	return d
}

// CountLine says the counts in words: "3 added, 2 modified".
func CountLine(counts map[Kind]int) string {
	var parts []string
	for _, k := range kindOrder {
		if counts[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[k], k))
		}
	}
	return strings.Join(parts, ", ")
}

// ShortID is the prefix of an ID the messages show.
func ShortID(id string) string { return id[:min(len(id), 6)] }

// Summary is the paragraph hutch run --review prints when its command
// ends: set id's counts and size, and how to see and apply it; or that
// nothing changed.
func Summary(id string, changes []Change) string {
	if len(changes) == 0 {
		return fmt.Sprintf("hutch: change set %s: the command changed nothing in the workspace", id)
	}
	line := CountLine(Count(changes))
	if line == "" {
		dirs := 0
		for _, c := range changes {
			if c.isDirAddOrDelete() {
				dirs++
			}
		}
		line = fmt.Sprintf("%d empty directories added or removed", dirs)
	}
	short := ShortID(id)
	return fmt.Sprintf("hutch: change set %s: %s (%s); see it with hutch changes show %s, apply it with hutch changes apply %s",
		id, line, signedSize(Delta(changes)), short, short)
}

// signedSize writes n bytes with its sign, in the largest binary unit
// below it: "+12.3 KiB", "-512 B".
func signedSize(n int64) string {
	sign := "+"
	if n < 0 {
		sign, n = "-", -n
	}
	return sign + Size(n)
}

// Size writes n bytes in the largest binary unit below it.
func Size(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	f, units := float64(n)/1024, []string{"KiB", "MiB", "GiB", "TiB"}
	i := 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}
