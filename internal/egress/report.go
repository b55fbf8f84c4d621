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
	// Blocked; Summary counts all of them.
	maxKeptEvents = 10000
	// summaryListed is how many distinct refusals Summary lists.
	summaryListed = 5
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
	return &Recorder{w: w, counts: make(map[refusalKey]int)}
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

// Record writes e as one JSON line and, when its Action is "blocked",
// keeps it for Blocked and Summary. After a write error Record writes no
// more (Err returns the error) but still keeps events.
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
	if e.Action != "blocked" {
		return
	}
	r.total++
	if len(r.blocked) < maxKeptEvents {
		r.blocked = append(r.blocked, e)
	}
	k := refusalKey{e.Host, e.Port, e.Reason}
	if r.counts[k] == 0 {
		r.order = append(r.order, k)
	}
	r.counts[k]++
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

// Summary returns the one-line summary of the refusals for stderr, or ""
// when nothing was blocked:
//
//	blocked 3 connections: evil.test:443 (not in allowedDomains) ×2, example.com:22 (port 22 not allowed for example.com)
//
// Identical refusals (same host, port and reason) are listed once with
// their count; at most 5 are listed, in the order of their first event,
// followed by "and N more" for the distinct refusals left out.
func (r *Recorder) Summary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.total == 0 {
		return ""
	}
	var b strings.Builder
	noun := "connections"
	if r.total == 1 {
		noun = "connection"
	}
	fmt.Fprintf(&b, "blocked %d %s: ", r.total, noun)
	for i, k := range r.order {
		if i == summaryListed {
			fmt.Fprintf(&b, ", and %d more", len(r.order)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
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
	}
	return b.String()
}
