package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// events collects a watch's events until one matches want or d passes.
type eventLog struct {
	t  *testing.T
	w  *Watch
	ev []WatchEvent
}

func (l *eventLog) waitFor(want WatchEvent, d time.Duration) {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for !slices.Contains(l.ev, want) {
		evs, err := l.w.Next(ctx)
		if err != nil {
			l.t.Fatalf("waiting for %+v: %v; events: %+v", want, err, l.ev)
		}
		l.ev = append(l.ev, evs...)
	}
}

func TestWatch(t *testing.T) {
	noLeaks(t)
	c, _ := agentPair(t, ServeOptions{}, false)
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "old"), 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(ctx, dir, true)
	if err != nil {
		t.Fatal(err)
	}
	l := &eventLog{t: t, w: w}
	f := filepath.Join(dir, "f.txt")
	if err := os.WriteFile(f, []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	l.waitFor(WatchEvent{Op: WatchCreate, Path: "f.txt"}, 5*time.Second)
	l.waitFor(WatchEvent{Op: WatchWrite, Path: "f.txt"}, 5*time.Second)
	if err := os.Chmod(f, 0o600); err != nil {
		t.Fatal(err)
	}
	l.waitFor(WatchEvent{Op: WatchChmod, Path: "f.txt"}, 5*time.Second)
	if err := os.Rename(f, filepath.Join(dir, "g.txt")); err != nil {
		t.Fatal(err)
	}
	l.waitFor(WatchEvent{Op: WatchRename, Path: "f.txt"}, 5*time.Second)
	l.waitFor(WatchEvent{Op: WatchCreate, Path: "g.txt"}, 5*time.Second)
	if err := os.Remove(filepath.Join(dir, "g.txt")); err != nil {
		t.Fatal(err)
	}
	l.waitFor(WatchEvent{Op: WatchRemove, Path: "g.txt"}, 5*time.Second)

	// A directory that existed, one created later, and one below it.
	if err := os.WriteFile(filepath.Join(dir, "old", "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	l.waitFor(WatchEvent{Op: WatchCreate, Path: "old/x"}, 5*time.Second)
	if err := os.MkdirAll(filepath.Join(dir, "new", "deep"), 0o755); err != nil {
		t.Fatal(err)
	}
	l.waitFor(WatchEvent{Op: WatchCreate, Path: "new", IsDir: true}, 5*time.Second)
	l.waitFor(WatchEvent{Op: WatchCreate, Path: "new/deep", IsDir: true}, 5*time.Second)
	if err := os.WriteFile(filepath.Join(dir, "new", "deep", "y"), []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	l.waitFor(WatchEvent{Op: WatchCreate, Path: "new/deep/y"}, 5*time.Second)
	// A directory moved within the tree is watched under its new name.
	if err := os.Rename(filepath.Join(dir, "new"), filepath.Join(dir, "moved")); err != nil {
		t.Fatal(err)
	}
	l.waitFor(WatchEvent{Op: WatchRename, Path: "new", IsDir: true}, 5*time.Second)
	if err := os.WriteFile(filepath.Join(dir, "moved", "deep", "z"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	l.waitFor(WatchEvent{Op: WatchCreate, Path: "moved/deep/z"}, 5*time.Second)
	for _, ev := range l.ev {
		if ev.Op == WatchOverflow {
			t.Errorf("unexpected overflow: %+v", l.ev)
		}
	}

	w.Stop()
	if _, err := w.Next(ctx); err != io.EOF {
		t.Errorf("next after stop: %v", err)
	}
	// The agent forgets the watch.
	deadline := time.Now().Add(5 * time.Second)
	for {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range ents {
			if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); l == "anon_inode:inotify" {
				n++
			}
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d inotify instances left after stop", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestWatchNotRecursive(t *testing.T) {
	c, _ := agentPair(t, ServeOptions{}, false)
	ctx := context.Background()
	dir := t.TempDir()
	w, err := c.Watch(ctx, dir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	l := &eventLog{t: t, w: w}
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	l.waitFor(WatchEvent{Op: WatchCreate, Path: "d", IsDir: true}, 5*time.Second)
	if err := os.WriteFile(filepath.Join(dir, "d", "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "marker"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	l.waitFor(WatchEvent{Op: WatchCreate, Path: "marker"}, 5*time.Second)
	for _, ev := range l.ev {
		if ev.Path == "d/x" {
			t.Errorf("event in a subdirectory of a watch that is not recursive: %+v", ev)
		}
	}
}

func TestWatchEnds(t *testing.T) {
	c, _ := agentPair(t, ServeOptions{}, false)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "w")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(ctx, dir, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	l := &eventLog{t: t, w: w}
	l.waitFor(WatchEvent{Op: WatchRemove, IsDir: true}, 5*time.Second)
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if evs, err := w.Next(tctx); err != io.EOF {
		t.Errorf("after the directory was removed: %+v, %v", evs, err)
	}
	_, err = c.Watch(ctx, dir, false)
	agentError(t, err, CodeNotFound)
	_, err = c.Watch(ctx, "relative", false)
	agentError(t, err, CodeInvalid)
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = c.Watch(ctx, f, false)
	agentError(t, err, CodeNotDir)
}

// TestWatchBounds checks the watch limit and the event rate.
func TestWatchBounds(t *testing.T) {
	c, s := agentPair(t, ServeOptions{}, false)
	s.maxWatches, s.eventRate = 3, 20
	ctx := context.Background()
	dir := t.TempDir()
	for _, d := range []string{"a", "b", "c", "d"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w, err := c.Watch(ctx, dir, true)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	l := &eventLog{t: t, w: w}
	l.waitFor(WatchEvent{Op: WatchOverflow}, 5*time.Second) // only 3 directories watched
	l.ev = nil
	for i := range 200 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l.waitFor(WatchEvent{Op: WatchOverflow}, 5*time.Second)
	time.Sleep(100 * time.Millisecond)
	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	evs, _ := w.Next(tctx)
	l.ev = append(l.ev, evs...)
	if n := len(l.ev); n > 40 {
		t.Errorf("%d events at a rate of 20 a second", n)
	}
}

// TestWatchOverflow checks that a kernel queue overflow, when the events
// are not read, is reported.
func TestWatchOverflow(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 25,000 files")
	}
	c, s := agentPair(t, ServeOptions{}, false)
	s.eventRate = 1 << 30
	ctx := context.Background()
	dir := t.TempDir()
	w, err := c.Watch(ctx, dir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// The client's window holds a few thousand events, the kernel's queue
	// (fs.inotify.max_queued_events) 16,384 by default.
	b, _ := os.ReadFile("/proc/sys/fs/inotify/max_queued_events")
	var queued int
	fmt.Sscan(string(b), &queued)
	testutil.Need(t, queued > 0 && queued <= 100_000, fmt.Sprintf("fs.inotify.max_queued_events %q is not between 1 and 100,000", b))
	for i := range queued + 10_000 {
		f, err := os.Create(filepath.Join(dir, fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	l := &eventLog{t: t, w: w}
	l.waitFor(WatchEvent{Op: WatchOverflow}, 20*time.Second)
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestClientWatchBounds(t *testing.T) {
	for name, frames := range map[string]func(id uint32) [][]byte{
		"unknown op": func(id uint32) [][]byte {
			return [][]byte{raw(frameEvents, streamOut, id, `[{"op":"boom","path":"x"}]`)}
		},
		"absolute path": func(id uint32) [][]byte {
			return [][]byte{raw(frameEvents, streamOut, id, `[{"op":"create","path":"/etc"}]`)}
		},
		"dot dot": func(id uint32) [][]byte {
			return [][]byte{raw(frameEvents, streamOut, id, `[{"op":"create","path":"a/../b"}]`)}
		},
		"empty create": func(id uint32) [][]byte {
			return [][]byte{raw(frameEvents, streamOut, id, `[{"op":"create","path":""}]`)}
		},
		"not json":        func(id uint32) [][]byte { return [][]byte{raw(frameEvents, streamOut, id, `[`)} },
		"wrong stream":    func(id uint32) [][]byte { return [][]byte{raw(frameEvents, streamErr, id, `[]`)} },
		"data on a watch": func(id uint32) [][]byte { return [][]byte{raw(frameData, streamOut, id, `x`)} },
		"events after eof": func(id uint32) [][]byte {
			return [][]byte{raw(frameEOF, streamOut, id, ``), raw(frameEvents, streamOut, id, `[{"op":"create","path":"x"}]`)}
		},
		"over the window": func(id uint32) [][]byte {
			ev := `{"op":"create","path":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}`
			body := "[" + ev
			for len(body) < window {
				body += "," + ev
			}
			return [][]byte{raw(frameEvents, streamOut, id, body+"]")}
		},
	} {
		t.Run(name, func(t *testing.T) {
			c, f := newFake(t)
			logs := &testutil.Buffer{}
			c.SetLog(slog.New(slog.NewTextHandler(logs, nil)))
			go func() {
				f.hello()
				id, m := f.request()
				if m.Op != opWatch {
					t.Errorf("request %+v", m)
				}
				f.send(raw(frameResponse, 0, id, `{}`))
				f.send(frames(id)...)
				f.drain()
			}()
			w, err := c.Watch(context.Background(), "/x", true)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for {
				_, err = w.Next(ctx)
				if err != nil {
					break
				}
			}
			if name == "events after eof" {
				// An id the client no longer knows is ignored.
				if err != io.EOF || c.Err() != nil {
					t.Errorf("next: %v, connection: %v", err, c.Err())
				}
				return
			}
			if !errors.Is(err, ErrProtocol) {
				t.Errorf("next: %v", err)
			}
			// The watch alone ended, and the log says why: the
			// connection goes on.
			if err := c.Err(); err != nil {
				t.Errorf("a malformed watch event ended the connection: %v", err)
			}
			if !strings.Contains(logs.String(), "broke the protocol in one request") || !strings.Contains(logs.String(), "op=watch") {
				t.Errorf("log: %q", logs.String())
			}
		})
	}
}

// TestWatchDirectoryItself: the events inotify reports of a watched
// directory itself (a subdirectory of a recursive watch made and chmodded,
// the watched directory's own mode changed) are no events of a path
// element "": the subdirectory's are reported by its parent, under its
// name, and the watch and the connection go on.
func TestWatchDirectoryItself(t *testing.T) {
	c, _ := agentPair(t, ServeOptions{}, false)
	ctx := context.Background()
	dir := t.TempDir()
	w, err := c.Watch(ctx, dir, true)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	l := &eventLog{t: t, w: w}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	l.waitFor(WatchEvent{Op: WatchCreate, Path: "sub", IsDir: true}, 10*time.Second)
	// Watched by now: a file in it is reported.
	if err := os.WriteFile(filepath.Join(sub, "a"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	l.waitFor(WatchEvent{Op: WatchCreate, Path: "sub/a"}, 10*time.Second)
	for _, p := range []string{sub, dir} {
		if err := os.Chmod(p, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, time.Now(), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	l.waitFor(WatchEvent{Op: WatchChmod, Path: "sub", IsDir: true}, 10*time.Second)
	if err := os.WriteFile(filepath.Join(sub, "b"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	l.waitFor(WatchEvent{Op: WatchCreate, Path: "sub/b"}, 10*time.Second)
	for _, ev := range l.ev {
		if ev.Path == "" || strings.HasSuffix(ev.Path, "/") {
			t.Errorf("an event without a name: %+v", ev)
		}
	}
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
}
