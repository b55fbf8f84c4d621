package egress

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
)

const (
	// maxKeptEvents bounds the blocked events a Recorder keeps for
	// Blocked, and the distinct refusals, names and fixes it keeps for
	// Summary and Lines; they count all of them.
	maxKeptEvents = 10000
	// summaryListed is how many distinct refusals (and names looked up)
	// Summary and Lines list.
	summaryListed = 5
	// fixesListed is how many distinct fixes Lines lists.
	fixesListed = 8
)

// Recorder collects the events of one sandbox for `hutch run --report`
// and its summary on stderr. It is safe for concurrent use; its Record
// method fits Proxy.Record.
type Recorder struct {
	mu      sync.Mutex
	w       io.Writer
	err     error
	blocked []Event
	total   int                // blocked events, kept or not
	counts  map[refusalKey]int // distinct refusals
	order   []refusalKey       // in the order of their first event
	// unlisted counts the blocked events whose refusal came after
	// maxKeptEvents distinct ones.
	unlisted int
	// Lookups: their number, per name, the names in the order of their
	// first lookup, and the reason of the first.
	lookups  int
	lcounts  map[string]int
	lorder   []string
	lreason  string
	lunknown int // lookups of names beyond maxKeptEvents distinct ones
	// fixes are the distinct Allow values of the events, in order.
	fixes    []string
	fixSeen  map[string]bool
	fixFirst string // put before the fixes (SetFixPrefix)
}

// refusalKey identifies identical refusals for Summary.
type refusalKey struct {
	host   string
	port   int
	reason string
}

// NewRecorder returns a Recorder that writes every event as one JSON line
// to w as it arrives; nil w writes nothing.
func NewRecorder(w io.Writer) *Recorder {
	return &Recorder{w: w, counts: make(map[refusalKey]int), lcounts: make(map[string]int), fixSeen: make(map[string]bool)}
}

// SetFixPrefix sets what the fix line of Lines starts with, before the
// events' own fixes: "--net proxy" when the network was turned off on
// purpose, so that allowing a host takes that flag too.
func (r *Recorder) SetFixPrefix(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fixFirst = s
}

// Note writes v, any other record of the sandbox's run (what hutch set
// aside when it ended), as one JSON line of the report.
func (r *Recorder) Note(v any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w == nil || r.err != nil {
		return
	}
	line, err := json.Marshal(v)
	if err == nil {
		_, err = r.w.Write(append(line, '\n'))
	}
	if err != nil {
		r.err = fmt.Errorf("writing the report: %w", err)
	}
}

// Record writes e as one JSON line and, when its Action is "blocked" or
// "lookup", keeps it for Blocked, Summary and Lines. After a write error
// Record writes no more (Err returns the error) but still keeps events.
func (r *Recorder) Record(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w != nil && r.err == nil {
		line, err := json.Marshal(e)
		if err == nil {
			line = append(line, '\n')
			_, err = r.w.Write(line)
		}
		if err != nil {
			r.err = fmt.Errorf("writing the report: %w", err)
		}
	}
	switch e.Action {
	case "blocked":
		r.total++
		if len(r.blocked) < maxKeptEvents {
			r.blocked = append(r.blocked, e)
		}
		k := refusalKey{e.Host, e.Port, e.Reason}
		switch {
		case r.counts[k] > 0:
			r.counts[k]++
		case len(r.order) < maxKeptEvents:
			r.order = append(r.order, k)
			r.counts[k]++
		default:
			r.unlisted++
		}
	case "lookup":
		r.lookups++
		if r.lookups == 1 {
			r.lreason = e.Reason
		}
		switch {
		case r.lcounts[e.Host] > 0:
			r.lcounts[e.Host]++
		case len(r.lorder) < maxKeptEvents:
			r.lorder = append(r.lorder, e.Host)
			r.lcounts[e.Host]++
		default:
			r.lunknown++
		}
	default:
		return
	}
	if e.Allow != "" && !r.fixSeen[e.Allow] && len(r.fixes) < maxKeptEvents {
		r.fixSeen[e.Allow] = true
		r.fixes = append(r.fixes, e.Allow)
	}
}

// Err returns the first error writing the report, or nil.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Blocked returns the blocked events recorded so far, in the order they
// arrived (the first 10000 of them).
func (r *Recorder) Blocked() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.blocked...)
}

// Summary returns the one-line summary of the refused connections for
// stderr, or "" when nothing was blocked:
//
//	blocked 3 connections: evil.test:443 (not in allowedDomains) ×2, example.com:22 (port 22 not allowed for example.com)
//
// Identical refusals (same host, port and reason) are listed once with
// their count; at most 5 are listed, in the order of their first event,
// followed by "and N more" for the distinct refusals left out.
func (r *Recorder) Summary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.summaryLocked()
}

func (r *Recorder) summaryLocked() string {
	if r.total == 0 {
		return ""
	}
	var b strings.Builder
	noun := "connections"
	if r.total == 1 {
		noun = "connection"
	}
	fmt.Fprintf(&b, "blocked %d %s: ", r.total, noun)
	writeListed(&b, r.order, r.unlisted > 0, func(k refusalKey) {
		if k.host == "" {
			b.WriteString("an unknown destination")
		} else {
			b.WriteString(cleanText(hostPort(k.host, k.port), maxEventText))
		}
		if k.reason != "" {
			fmt.Fprintf(&b, " (%s)", cleanText(k.reason, maxEventText))
		}
		if n := r.counts[k]; n > 1 {
			fmt.Fprintf(&b, " ×%d", n)
		}
	})
	return b.String()
}

// writeListed writes the first summaryListed of items with write, comma
// separated, then "and N more" for the rest, or "and more" when only
// unlisted (items not kept) are left out.
func writeListed[T any](b *strings.Builder, items []T, unlisted bool, write func(T)) {
	for i, it := range items {
		if i == summaryListed {
			fmt.Fprintf(b, ", and %d more", len(items)-i)
			return
		}
		if i > 0 {
			b.WriteString(", ")
		}
		write(it)
	}
	if unlisted {
		b.WriteString(", and more")
	}
}

// Lines returns what hutch says on stderr when the sandbox ends, a line
// each (without the "hutch: " that starts them), or nothing when the
// sandbox neither was refused a connection nor looked up a name:
//
//	blocked 2 connections: registry.npmjs.org:443 (the sandbox has no network (--net none)) ×2
//	3 name lookups answered "no such host" (the sandbox has no network (--net none)): example.org ×2, pypi.org
//	to allow them: --allow-domain registry.npmjs.org --allow-domain example.org --allow-domain pypi.org
//
// The first is Summary. The second lists the names the sandbox looked up
// itself (events "lookup"), as Summary lists refusals, with the reason of
// the first lookup. The third gathers the events' fixes (Event.Allow),
// each once, at most 8.
func (r *Recorder) Lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	if s := r.summaryLocked(); s != "" {
		out = append(out, s)
	}
	if r.lookups > 0 {
		var b strings.Builder
		noun := "name lookups"
		if r.lookups == 1 {
			noun = "name lookup"
		}
		fmt.Fprintf(&b, "%d %s answered \"no such host\"", r.lookups, noun)
		if r.lreason != "" {
			fmt.Fprintf(&b, " (%s)", cleanText(r.lreason, maxEventText))
		}
		b.WriteString(": ")
		writeListed(&b, r.lorder, r.lunknown > 0, func(name string) {
			b.WriteString(cleanText(name, maxEventText))
			if n := r.lcounts[name]; n > 1 {
				fmt.Fprintf(&b, " ×%d", n)
			}
		})
		out = append(out, b.String())
	}
	if len(r.fixes) > 0 {
		var b strings.Builder
		if len(r.fixes) == 1 {
			b.WriteString("to allow it:")
		} else {
			b.WriteString("to allow them:")
		}
		flags := r.fixFirst == "" || strings.HasPrefix(r.fixFirst, "--")
		for _, f := range r.fixes {
			flags = flags && strings.HasPrefix(f, "--")
		}
		sep := " "
		if !flags {
			sep = "; "
		}
		if r.fixFirst != "" {
			b.WriteString(" " + r.fixFirst)
		}
		for i, f := range r.fixes {
			if i == fixesListed {
				fmt.Fprintf(&b, "%sand %d more", sep, len(r.fixes)-i)
				break
			}
			if i > 0 || r.fixFirst != "" {
				b.WriteString(sep)
			} else {
				b.WriteString(" ")
			}
			b.WriteString(cleanText(f, maxEventText))
		}
		out = append(out, b.String())
	}
	return out
}
