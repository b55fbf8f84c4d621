package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Event types of a sandbox's event stream.
const (
	EventCreated       = "created"        // its record was made; it is starting (data: expires, tier; warm: true if taken from the warm pool)
	EventStarted       = "started"        // it runs and answers
	EventExec          = "exec"           // a command was started (data: pid, args)
	EventExit          = "exit"           // a command ended (data: pid, code, signal)
	EventEgressRefused = "egress_refused" // its proxy refused a connection (data: protocol, host, port, reason, allow: what would allow it)
	EventLookup        = "lookup"         // a command looked up a name itself, answered "no such host" (data: host, reason, allow)
	EventTimeout       = "timeout"        // its timeout passed; it is ending
	EventIdleTimeout   = "idle_timeout"   // it was idle too long; it is ending
	EventDestroyed     = "destroyed"      // it was destroyed; it is ending
	EventPaused        = "paused"         // its processes were frozen (Pause)
	EventResumed       = "resumed"        // its processes go on (Resume)
	EventSnapshot      = "snapshot"       // its root layer was snapshotted (data: snapshot, size)
	EventForked        = "forked"         // it was forked (data: count, snapshot)
	EventOOM           = "oom"            // the kernel killed processes for exceeding the memory limit (data: kills, total)
	EventNetwork       = "network"        // its egress rules were replaced (data: mode, allowed_domains, allowed_cidrs, denied_domains, closed)
	EventEnded         = "ended"          // it ended (data: reason); always the last event
	// EventDropped is not recorded: a subscriber that fell behind gets it
	// in place of the events it missed (data: count).
	EventDropped = "dropped"
)

// Bounds of the event logs.
const (
	// eventLogSize is how many of a sandbox's last events are kept.
	eventLogSize = 1000
	// eventSubBuffer is the buffer of a subscriber's channel.
	eventSubBuffer = 64
	// eventRetention is how long a sandbox's events are kept once it
	// ended, so that a client can read how.
	eventRetention = 5 * time.Minute
)

// Event is one thing that happened to a sandbox. Data never holds secret
// values or file contents.
type Event struct {
	// Seq numbers the sandbox's events from 1, without gaps.
	Seq  int64          `json:"seq"`
	Time time.Time      `json:"time"`
	Type string         `json:"type"`
	Data map[string]any `json:"data,omitempty"`
}

// eventLog keeps the last events of one sandbox. Safe for concurrent use:
// appending never blocks on a subscriber.
type eventLog struct {
	tenant string

	mu     sync.Mutex
	ring   []Event // len(ring) is the capacity; ring[(seq-1)%cap] holds seq
	seq    int64   // the last sequence number given
	closed bool    // the final event was appended
	wake   chan struct{}
}

func newEventLog(tenant string, size int) *eventLog {
	return &eventLog{tenant: tenant, ring: make([]Event, size), wake: make(chan struct{})}
}

// append records an event of type typ, unless the log is closed; with
// last, it closes the log.
func (lg *eventLog) append(typ string, data map[string]any, last bool) {
	if lg == nil {
		return
	}
	lg.mu.Lock()
	defer lg.mu.Unlock()
	if lg.closed {
		return
	}
	lg.seq++
	lg.ring[(lg.seq-1)%int64(len(lg.ring))] = Event{Seq: lg.seq, Time: time.Now().UTC(), Type: typ, Data: data}
	lg.closed = last
	close(lg.wake)
	lg.wake = make(chan struct{})
}

// after returns the kept events with Seq > since, how many after since are
// no longer kept, whether the log is closed, and a channel closed at the
// next append.
func (lg *eventLog) after(since int64) (evs []Event, lost int64, closed bool, wake <-chan struct{}) {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	first := max(lg.seq-int64(len(lg.ring))+1, 1)
	if since < first-1 {
		lost = first - 1 - since
		since = first - 1
	}
	for s := since + 1; s <= lg.seq; s++ {
		evs = append(evs, lg.ring[(s-1)%int64(len(lg.ring))])
	}
	return evs, lost, lg.closed, lg.wake
}

// subscribe returns a channel of the events with Seq > since, then of the
// new ones, closed once the final event was sent or ctx ended. A
// subscriber that falls more than the log's size behind gets an
// EventDropped in place of the events it missed.
func (lg *eventLog) subscribe(ctx context.Context, since int64, buffer int) <-chan Event {
	ch := make(chan Event, buffer)
	go func() {
		defer close(ch)
		cursor := max(since, 0)
		send := func(e Event) bool {
			select {
			case ch <- e:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for {
			evs, lost, closed, wake := lg.after(cursor)
			if lost > 0 {
				if !send(Event{Seq: cursor + lost, Time: time.Now().UTC(), Type: EventDropped, Data: map[string]any{"count": lost}}) {
					return
				}
				cursor += lost
			}
			for _, e := range evs {
				if e.Seq <= cursor {
					continue
				}
				if !send(e) {
					return
				}
				cursor = e.Seq
			}
			if len(evs) > 0 || lost > 0 {
				continue // more may have come meanwhile
			}
			if closed {
				return
			}
			select {
			case <-wake:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}

// newEvents starts the event log of tenant's new sandbox id.
func (m *Manager) newEvents(tenant, id string) *eventLog {
	lg := newEventLog(tenant, eventLogSize)
	m.evMu.Lock()
	if m.events == nil {
		m.events = make(map[string]*eventLog)
	}
	m.events[id] = lg
	m.evMu.Unlock()
	return lg
}

// eventsOf is the event log of tenant's sandbox id ("" tenant: any), nil
// if there is none.
func (m *Manager) eventsOf(tenant, id string) *eventLog {
	m.evMu.Lock()
	defer m.evMu.Unlock()
	lg := m.events[id]
	if lg == nil || (tenant != "" && lg.tenant != tenant) {
		return nil
	}
	return lg
}

// endEvents records the final event of sandbox id and forgets its log
// after eventRetention.
func (m *Manager) endEvents(id string, lg *eventLog, reason string) {
	if lg == nil {
		return
	}
	lg.append(EventEnded, map[string]any{"reason": reason}, true)
	time.AfterFunc(eventRetention, func() {
		m.evMu.Lock()
		if m.events[id] == lg {
			delete(m.events, id)
		}
		m.evMu.Unlock()
	})
}

// Emit records an event of tenant's sandbox id ("" tenant: any), such as
// EventExec or EventExit, which the API sees; nothing if the sandbox has
// no event log or has ended.
func (m *Manager) Emit(tenant, id, typ string, data map[string]any) {
	if lg := m.eventsOf(tenant, id); lg != nil {
		lg.append(typ, data, false)
	}
}

// Events returns the events of tenant's sandbox id with Seq > since, then
// follows the new ones: the channel is closed once the final EventEnded
// was sent or ctx ended. The events of an ended sandbox are kept for a
// while (eventRetention). A subscriber that falls behind by more than the
// log keeps gets an EventDropped in place of what it missed.
func (m *Manager) Events(ctx context.Context, tenant, id string, since int64) (<-chan Event, error) {
	if err := m.enter(); err != nil {
		return nil, err
	}
	defer m.leave()
	if !validID(id) {
		return nil, fmt.Errorf("sandbox %q: %w", id, ErrNotFound)
	}
	if lg := m.eventsOf(tenant, id); lg != nil {
		return lg.subscribe(ctx, since, eventSubBuffer), nil
	}
	if _, err := m.row(ctx, tenant, id); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("sandbox %s: its events are no longer kept: %w", id, ErrNotFound)
}

// EventLog is an event log as the manager keeps one per sandbox, for
// stand-ins of the manager (package apitest). Safe for concurrent use.
type EventLog struct{ lg *eventLog }

// NewEventLog returns an empty event log of the default size.
func NewEventLog() *EventLog { return &EventLog{newEventLog("", eventLogSize)} }

// Append records an event, unless End was called.
func (e *EventLog) Append(typ string, data map[string]any) { e.lg.append(typ, data, false) }

// End records the final EventEnded with reason; later events are ignored.
func (e *EventLog) End(reason string) {
	e.lg.append(EventEnded, map[string]any{"reason": reason}, true)
}

// Subscribe is like Manager.Events on this log.
func (e *EventLog) Subscribe(ctx context.Context, since int64) <-chan Event {
	return e.lg.subscribe(ctx, since, eventSubBuffer)
}
