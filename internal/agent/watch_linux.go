package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	// defaultMaxWatches bounds the directories one watch watches.
	defaultMaxWatches = 8192
	// defaultEventRate bounds the events one watch reports per second,
	// and in a burst.
	defaultEventRate = 10_000
	// inDontFollow is IN_DONTFOLLOW: a symlink is not followed.
	inDontFollow = 0x2000000
	// watchMask is what a watch asks inotify for.
	watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_DELETE |
		unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR
)

// watcher is the state of one watch request: an inotify instance of the
// agent's own, so that the kernel resolves every path in the sandbox's
// mount namespace.
type watcher struct {
	s         *server
	r         *areq
	root      string
	recursive bool
	fd        int
	f         *os.File
	dirs      map[int]string // watch descriptor → directory relative to root
	max       int

	batch    []byte // the events frame being built: "[" and events
	tokens   float64
	rate     float64
	last     time.Time
	dropping bool // events are being dropped for the rate; an overflow was sent
	full     bool // the watch limit was hit; an overflow was sent
}

// watch answers a watch request: once its directory (and, if recursive,
// every directory below it) is watched it responds, then sends events
// frames on stream 1 within the client's credit until the request is
// canceled or the directory is removed or moved, and ends with an eof on
// stream 1.
func (s *server) watch(r *areq, root string, recursive bool) {
	if e := checkPath("watch", root); e != nil {
		s.replyErr(r.id, e)
		return
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		s.replyErr(r.id, pathError("watch", root, err))
		return
	}
	w := &watcher{
		s: s, r: r, root: root, recursive: recursive, fd: fd,
		f:     os.NewFile(uintptr(fd), "inotify"),
		dirs:  make(map[int]string),
		max:   defaultMaxWatches,
		rate:  defaultEventRate,
		batch: []byte{'['},
		last:  time.Now(),
	}
	if s.maxWatches > 0 {
		w.max = s.maxWatches
	}
	if s.eventRate > 0 {
		w.rate = float64(s.eventRate)
	}
	w.tokens = w.rate
	defer w.f.Close()
	wd, err := unix.InotifyAddWatch(fd, root, watchMask)
	if err != nil {
		s.replyErr(r.id, pathError("watch", root, err))
		return
	}
	w.dirs[wd] = ""
	if recursive {
		w.addTree("", false)
	}
	if err := s.sendJSON(frameResponse, r.id, response{}); err != nil {
		return
	}
	if err := w.flush(); err != nil { // an overflow of the watch limit
		return
	}
	stop := context.AfterFunc(r.ctx, func() { _ = w.f.SetReadDeadline(time.Now()) })
	defer stop()
	err = w.run()
	if err != nil && r.ctx.Err() == nil {
		s.log.Warn("watch ended", "path", root, "err", err)
	}
	if r.ctx.Err() == nil {
		_ = s.send(encodeFrame(frameEOF, streamOut, r.id, nil))
	}
}

// run reads inotify events until the watch ends.
func (w *watcher) run() error {
	buf := make([]byte, 16<<10)
	for {
		// Read only with room for a full frame of events: a client that
		// reads no events lets the kernel's queue fill up (and overflow).
		if _, err := w.r.out[streamOut].waitFor(w.r.ctx, entriesBatch); err != nil {
			return nil
		}
		n, err := w.f.Read(buf)
		if w.r.ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			return fmt.Errorf("read inotify events: %w", err)
		}
		done, err := w.handle(buf[:n])
		if err == nil {
			err = w.flush()
		}
		if err != nil || done {
			return err
		}
	}
}

// handle turns the inotify events in b into events frames; done reports
// that the watched directory is gone.
func (w *watcher) handle(b []byte) (done bool, err error) {
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		size := unix.SizeofInotifyEvent + int(ev.Len)
		if size > len(b) {
			return false, fmt.Errorf("read inotify events: a truncated event")
		}
		name := string(b[unix.SizeofInotifyEvent:size])
		if i := strings.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		b = b[size:]
		mask := ev.Mask
		if mask&unix.IN_Q_OVERFLOW != 0 {
			if err := w.emit(wireEvent{Op: WatchOverflow}, true); err != nil {
				return false, err
			}
			continue
		}
		dir, ok := w.dirs[int(ev.Wd)]
		if !ok {
			continue
		}
		if mask&unix.IN_IGNORED != 0 {
			delete(w.dirs, int(ev.Wd))
			if dir == "" {
				return true, nil
			}
			continue
		}
		if mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
			if dir != "" {
				continue // its parent reported it
			}
			op := WatchRemove
			if mask&unix.IN_MOVE_SELF != 0 {
				op = WatchRename
			}
			if err := w.emit(wireEvent{Op: op, Dir: true}, true); err != nil {
				return false, err
			}
			return true, nil
		}
		if name == "" {
			// An event of a watched directory itself (its mode, its
			// times): its parent's watch reports it with its name, and
			// the root's own is no change in it.
			continue
		}
		rel := name
		if dir != "" {
			rel = dir + "/" + name
		}
		isDir := mask&unix.IN_ISDIR != 0
		var op string
		switch {
		case mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
			op = WatchCreate
		case mask&unix.IN_MODIFY != 0:
			op = WatchWrite
		case mask&unix.IN_ATTRIB != 0:
			op = WatchChmod
		case mask&unix.IN_DELETE != 0:
			op = WatchRemove
		case mask&unix.IN_MOVED_FROM != 0:
			op = WatchRename
			if isDir {
				w.forget(rel)
			}
		default:
			continue
		}
		if len(rel) > maxWatchPath || strings.HasPrefix(name, tempPrefix) {
			continue
		}
		if err := w.emit(wireEvent{Op: op, Path: wstr(rel), Dir: isDir}, false); err != nil {
			return false, err
		}
		if op == WatchCreate && isDir && w.recursive {
			if err := w.addTree(rel, true); err != nil {
				return false, err
			}
		}
	}
	return false, nil
}

// addTree watches directory rel and every directory below it; with
// report, it also reports what it finds there as created (it may have
// been created before the directory was watched).
func (w *watcher) addTree(rel string, report bool) error {
	if !w.add(rel) {
		return nil
	}
	d, err := os.Open(w.abs(rel))
	if err != nil {
		return nil // gone meanwhile
	}
	defer d.Close()
	for {
		if w.r.ctx.Err() != nil {
			return nil
		}
		ents, rerr := d.ReadDir(256)
		for _, e := range ents {
			sub := e.Name()
			if rel != "" {
				sub = rel + "/" + sub
			}
			if len(sub) > maxWatchPath {
				continue
			}
			if report {
				if err := w.emit(wireEvent{Op: WatchCreate, Path: wstr(sub), Dir: e.IsDir()}, false); err != nil {
					return err
				}
			}
			if e.IsDir() {
				if err := w.addTree(sub, report); err != nil {
					return err
				}
			}
		}
		if rerr != nil {
			return nil
		}
	}
}

// add watches directory rel unless the watch limit is reached (which is
// reported as an overflow, once); it reports whether it did.
func (w *watcher) add(rel string) bool {
	if rel == "" {
		return true // watched already
	}
	if len(w.dirs) >= w.max {
		if !w.full {
			w.full = true
			_ = w.emit(wireEvent{Op: WatchOverflow}, true)
		}
		return false
	}
	wd, err := unix.InotifyAddWatch(w.fd, w.abs(rel), watchMask|inDontFollow)
	if err != nil {
		return false
	}
	w.dirs[wd] = rel
	return true
}

// forget stops watching directory rel and those below it, moved away.
func (w *watcher) forget(rel string) {
	for wd, d := range w.dirs {
		if d == rel || strings.HasPrefix(d, rel+"/") {
			_, _ = unix.InotifyRmWatch(w.fd, uint32(wd))
			delete(w.dirs, wd)
		}
	}
	w.full = false
}

func (w *watcher) abs(rel string) string {
	switch {
	case rel == "":
		return w.root
	case strings.HasSuffix(w.root, "/"):
		return w.root + rel
	}
	return w.root + "/" + rel
}

// emit queues an event, within the event rate unless always: an event
// over the rate is dropped, and the first one dropped is reported as an
// overflow.
func (w *watcher) emit(ev wireEvent, always bool) error {
	if !always {
		now := time.Now()
		w.tokens = min(w.rate, w.tokens+now.Sub(w.last).Seconds()*w.rate)
		w.last = now
		if w.tokens < 1 {
			if w.dropping {
				return nil
			}
			w.dropping = true
			ev = wireEvent{Op: WatchOverflow}
		} else {
			w.tokens--
			w.dropping = false
		}
	}
	enc, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if len(w.batch)+len(enc)+2 > entriesBatch {
		if err := w.flush(); err != nil {
			return err
		}
	}
	if len(w.batch) > 1 {
		w.batch = append(w.batch, ',')
	}
	w.batch = append(w.batch, enc...)
	return nil
}

// flush sends the queued events in one frame, once the client granted
// room for it.
func (w *watcher) flush() error {
	if len(w.batch) == 1 {
		return nil
	}
	w.batch = append(w.batch, ']')
	cr := w.r.out[streamOut]
	if _, err := cr.waitFor(w.r.ctx, len(w.batch)); err != nil {
		return err
	}
	cr.spend(len(w.batch))
	err := w.s.send(encodeFrame(frameEvents, streamOut, w.r.id, w.batch))
	w.batch = w.batch[:1]
	return err
}
