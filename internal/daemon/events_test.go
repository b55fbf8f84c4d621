package daemon

import (
	"context"
	"testing"
	"time"
)

// collect reads ch until it is closed or d passed.
func collect(t *testing.T, ch <-chan Event, d time.Duration) []Event {
	t.Helper()
	var out []Event
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				return out
			}
			out = append(out, e)
		case <-timer.C:
			t.Fatalf("the channel was not closed within %s; got %d events", d, len(out))
			return out
		}
	}
}

func TestEventLogReplaySince(t *testing.T) {
	lg := newEventLog("a", 10)
	for range 5 {
		lg.append(EventExec, map[string]any{"pid": 1}, false)
	}
	lg.append(EventEnded, nil, true)
	lg.append(EventExec, nil, false) // after the end: ignored
	evs := collect(t, lg.subscribe(context.Background(), 3, 4), 5*time.Second)
	if len(evs) != 3 || evs[0].Seq != 4 || evs[2].Seq != 6 || evs[2].Type != EventEnded {
		t.Fatalf("since 3: %+v, want seq 4..6 ending with %q", evs, EventEnded)
	}
}

func TestEventLogBounded(t *testing.T) {
	lg := newEventLog("a", 10)
	for range 25 {
		lg.append(EventExec, nil, false)
	}
	lg.mu.Lock()
	n := len(lg.ring)
	lg.mu.Unlock()
	if n != 10 {
		t.Fatalf("the ring holds %d slots, want 10", n)
	}
	// From the start: the first 15 are no longer kept.
	lg.append(EventEnded, nil, true)
	evs := collect(t, lg.subscribe(context.Background(), 0, 4), 5*time.Second)
	if len(evs) != 11 || evs[0].Type != EventDropped || evs[0].Data["count"] != int64(16) || evs[1].Seq != 17 || evs[10].Seq != 26 {
		t.Fatalf("got %+v, want a drop marker of 16 then seq 17..26", evs)
	}
}

// TestEventLogSlowSubscriber: a subscriber that does not read never blocks
// the appender, and gets a drop marker for what it missed.
func TestEventLogSlowSubscriber(t *testing.T) {
	lg := newEventLog("a", 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := lg.subscribe(ctx, 0, 2)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 1000 {
			lg.append(EventExec, nil, false)
		}
		lg.append(EventEnded, nil, true)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("append blocked on a subscriber that does not read")
	}
	evs := collect(t, ch, 5*time.Second)
	var seen, dropped int64
	last := int64(0)
	for _, e := range evs {
		if e.Seq <= last {
			t.Fatalf("seq %d after %d", e.Seq, last)
		}
		last = e.Seq
		if e.Type == EventDropped {
			dropped += e.Data["count"].(int64)
		} else {
			seen++
		}
	}
	if dropped == 0 || seen+dropped != 1001 || evs[len(evs)-1].Type != EventEnded {
		t.Fatalf("saw %d, dropped %d (want a drop and 1001 in all, ending with %q): %+v", seen, dropped, EventEnded, evs)
	}
}

func TestEventLogCancel(t *testing.T) {
	lg := newEventLog("a", 10)
	ctx, cancel := context.WithCancel(context.Background())
	ch := lg.subscribe(ctx, 0, 4)
	lg.append(EventCreated, nil, false)
	if e := <-ch; e.Type != EventCreated || e.Seq != 1 {
		t.Fatalf("got %+v", e)
	}
	cancel()
	collect(t, ch, 5*time.Second)
}
