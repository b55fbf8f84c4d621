package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
)

// Operations of a WatchEvent.
const (
	// WatchCreate: a file or directory was created, or moved into place.
	WatchCreate = "create"
	// WatchWrite: a file's content changed.
	WatchWrite = "write"
	// WatchRemove: a file or directory was removed.
	WatchRemove = "remove"
	// WatchRename: a file or directory was moved away (where it went is
	// a create, if that is being watched).
	WatchRename = "rename"
	// WatchChmod: a file's metadata (mode, owner, times) changed.
	WatchChmod = "chmod"
	// WatchOverflow: events were lost — the kernel's queue overflowed,
	// the event rate was exceeded or a directory could not be watched
	// within the watch limit; its Path is "".
	WatchOverflow = "overflow"
)

// WatchEvent is a change in a watched directory.
type WatchEvent struct {
	// Op is one of the Watch operation constants.
	Op string
	// Path is the changed file's path relative to the watched directory,
	// "" for the directory itself (removed or moved: the watch ends) and
	// for an overflow.
	Path string
	// IsDir reports that the file is a directory.
	IsDir bool
}

// Watch is a watch started by Client.Watch.
type Watch struct {
	c *Client
	k *call
}

// watchQueue is the client's end of a watch's events: it keeps at most a
// window of their frames' bytes, grants the agent more once its caller took
// a quarter of a window, and ends the watch (not the connection: see
// Client.breach) if the agent sends more than it was granted or a
// malformed event (S7).
type watchQueue struct {
	mu        sync.Mutex
	events    []WatchEvent
	allowance int
	ungranted int
	ended     bool
	err       error
	changed   notifier
}

// push adds a frame of events from the agent; an error says how the frame
// breaks the protocol, and nothing of it was added.
func (q *watchQueue) push(body []byte) error {
	q.mu.Lock()
	room := q.allowance
	q.mu.Unlock()
	if len(body) > room { // checked again below; only the reader pushes
		return fmt.Errorf("%d bytes of watch events exceed the window (%d left)", len(body), room)
	}
	var ws []wireEvent
	if err := json.Unmarshal(body, &ws); err != nil {
		return fmt.Errorf("watch events: %v", err)
	}
	evs := make([]WatchEvent, 0, len(ws))
	for _, w := range ws {
		ev, err := watchEvent(w)
		if err != nil {
			return fmt.Errorf("watch events: %v", err)
		}
		evs = append(evs, ev)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ended {
		if q.err != nil {
			return nil
		}
		return errors.New("watch events after the end of the watch")
	}
	if len(body) > q.allowance {
		return fmt.Errorf("%d bytes of watch events exceed the window (%d left)", len(body), q.allowance)
	}
	q.allowance -= len(body)
	q.ungranted += len(body) // granted again once taken
	q.events = append(q.events, evs...)
	q.changed.notify()
	return nil
}

// end ends the queue: by the watch's end (err nil), or abnormally.
func (q *watchQueue) end(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ended && (err == nil || q.err != nil) {
		return
	}
	q.ended = true
	if err != nil {
		q.err = err
		q.events = nil
	}
	q.changed.notify()
}

// watchEvent checks and converts an event from the agent.
func watchEvent(w wireEvent) (WatchEvent, error) {
	p := string(w.Path)
	switch w.Op {
	case WatchCreate, WatchWrite, WatchRemove, WatchRename, WatchChmod, WatchOverflow:
	default:
		return WatchEvent{}, fmt.Errorf("unknown event %.40q", w.Op)
	}
	if len(p) > maxWatchPath || strings.IndexByte(p, 0) >= 0 {
		return WatchEvent{}, fmt.Errorf("bad path %.64q", p)
	}
	if p != "" {
		for _, e := range strings.Split(p, "/") {
			if e == "" || e == "." || e == ".." || len(e) > maxName {
				return WatchEvent{}, fmt.Errorf("bad path %.64q", p)
			}
		}
	} else if w.Op != WatchRemove && w.Op != WatchRename && w.Op != WatchOverflow {
		return WatchEvent{}, fmt.Errorf("%s event without a path", w.Op)
	}
	return WatchEvent{Op: w.Op, Path: p, IsDir: w.Dir}, nil
}

// Watch watches the directory at path (a symlink to one is followed) with
// inotify in the sandbox; with recursive, also every directory below it,
// including those created later (the files found in a new directory are
// reported as created, possibly twice). One watch watches at most 8,192
// directories and reports at most 10,000 events a second; events beyond
// are lost and reported as one WatchOverflow, as are those lost when the
// kernel's queue overflows because they are not read. Watch returns once
// the directories are watched. The watch ends when Stop is called, when
// the directory is removed or moved, or when the connection ends.
func (c *Client) Watch(ctx context.Context, path string, recursive bool) (*Watch, error) {
	if e := checkPath("watch", path); e != nil {
		return nil, e
	}
	k, _, err := c.roundTrip(ctx, &request{Op: opWatch, Path: wstr(path), Recursive: recursive}, func(k *call) {
		k.watch = &watchQueue{allowance: window}
	})
	if err != nil {
		return nil, err
	}
	return &Watch{c: c, k: k}, nil
}

// Next waits for events and returns all those that arrived, at least one.
// It returns io.EOF once the watch ended and its events were returned, the
// connection's error once it ended, and ctx's error if ctx ends first.
func (w *Watch) Next(ctx context.Context) ([]WatchEvent, error) {
	q := w.k.watch
	for {
		q.mu.Lock()
		if len(q.events) > 0 {
			evs := q.events
			q.events = nil
			grant := 0
			if !q.ended && q.ungranted >= window/4 {
				grant, q.ungranted = q.ungranted, 0
				q.allowance += grant
			}
			q.mu.Unlock()
			if grant > 0 {
				_ = w.c.write(context.Background(), creditFrame(streamOut, w.k.id, grant))
			}
			return evs, nil
		}
		if q.ended {
			err := q.err
			q.mu.Unlock()
			if err == nil || err == errWatchStopped {
				err = io.EOF
			}
			return nil, err
		}
		ch := q.changed.wait()
		q.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Stop ends the watch: the agent stops watching, and Next returns io.EOF.
func (w *Watch) Stop() {
	w.c.abandon(w.k, errWatchStopped)
}

// errWatchStopped ends the events of a stopped watch; Next reports it as
// io.EOF.
var errWatchStopped = errors.New("agent: watch stopped")
