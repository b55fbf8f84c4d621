package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Event types of a sandbox's event stream.
const (
	EventCreated       = "created"        // it is starting
	EventStarted       = "started"        // it runs
	EventExec          = "exec"           // a command started (data: pid, args)
	EventExit          = "exit"           // a command ended (data: pid, code, and signal, timed_out or error)
	EventEgressRefused = "egress_refused" // its proxy refused a connection (data: protocol, host, port, reason, allow: what would allow it)
	EventLookup        = "lookup"         // a command looked up a name itself, answered "no such host" (data: host, reason, allow)
	EventTimeout       = "timeout"        // its timeout passed (data: reason)
	EventIdleTimeout   = "idle_timeout"   // it was idle too long (data: reason)
	EventDestroyed     = "destroyed"      // it was destroyed (data: reason)
	EventPaused        = "paused"         // its processes were frozen (Client.Pause), or all but its agent killed ({"memory": false}, PauseWith)
	EventResumed       = "resumed"        // its processes go on (Client.Resume)
	EventOOM           = "oom"            // the kernel killed processes for exceeding its memory limit (data: kills, total)
	EventEnded         = "ended"          // it ended (data: reason); the last event
	// RunCode ran code (data: language or context, duration_ms, error:
	// the exception's name if it raised one, code: its first bytes).
	EventCodeExecuted = "code.executed"
	// A command or host its approvals ask about waits for an answer
	// (Client.Approvals; data: id, kind, subject, command, rule, reason,
	// expires), was answered or expired (data: id, answer, by, took_ms),
	// or a rule refused it without asking (data: kind, subject, command,
	// rule, reason).
	EventApprovalRequested = "approval.requested"
	EventApprovalAnswered  = "approval.answered"
	EventApprovalDenied    = "approval.denied"
	EventDropped           = "dropped" // the reader fell behind: data.count events were skipped
)

// Event is one thing that happened to a sandbox.
type Event struct {
	// Seq numbers the sandbox's events from 1; pass the last one seen as
	// since to resume.
	Seq  int64          `json:"seq"`
	Time time.Time      `json:"time"`
	Type string         `json:"type"`
	Data map[string]any `json:"data,omitempty"`
}

// maxEventLine bounds one line of the event stream.
const maxEventLine = 1 << 20

// Events follows a sandbox's events: those the daemon still keeps with a
// sequence number above since (0: all), then the new ones as they happen.
// The sequence ends without an error after the EventEnded event. Any
// failure, including ctx ending or the stream breaking off before
// EventEnded, is yielded once as the error of a zero Event, and ends the
// sequence. Stopping the loop early closes the stream.
//
//	for ev, err := range c.Events(ctx, id, 0) {
//		if err != nil {
//			return err
//		}
//		fmt.Println(ev.Type, ev.Data)
//	}
func (c *Client) Events(ctx context.Context, id string, since int64) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var q url.Values
		if since > 0 {
			q = url.Values{"since": {strconv.FormatInt(since, 10)}}
		}
		req, err := c.newRequest(ctx, http.MethodGet, sandboxPath(id, "events"), q, nil)
		if err != nil {
			yield(Event{}, err)
			return
		}
		req.Header.Set("Accept", "application/x-ndjson")
		resp, err := c.send(req)
		if err != nil {
			yield(Event{}, err)
			return
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 4096), maxEventLine)
		for sc.Scan() {
			var ev Event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				yield(Event{}, fmt.Errorf("hutch client: events of %s: decode: %w", id, err))
				return
			}
			if !yield(ev, nil) || ev.Type == EventEnded {
				return
			}
		}
		err = sc.Err()
		if ctx.Err() != nil {
			err = ctx.Err()
		} else if err == nil {
			err = io.ErrUnexpectedEOF
		}
		yield(Event{}, fmt.Errorf("hutch client: events of %s: %w", id, err))
	}
}
