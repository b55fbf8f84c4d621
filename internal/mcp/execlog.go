package mcp

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"time"
)

// MaxLog bounds the full output of one command kept for its link: what
// comes beyond is counted and dropped.
const MaxLog = 64 << 20

// execLog is the full output of a command, for the link a cut result
// carries: in memory while it is small (inline bytes), then in a file of
// the host's temporary directory, removed once nothing links to it.
type execLog struct {
	mu      sync.Mutex
	inline  int
	mem     []byte
	f       *os.File
	size    int64
	dropped int64
	err     error // of the file; the log stays as it was
	linked  bool  // a link was published
	removed bool
	expires time.Time // when kept for its link after its session
}

func newExecLog(inline int) *execLog { return &execLog{inline: inline} }

// write appends b, up to MaxLog.
func (l *execLog) write(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.removed || l.err != nil {
		l.dropped += int64(len(b))
		return
	}
	if room := MaxLog - l.size; int64(len(b)) > room {
		l.dropped += int64(len(b)) - room
		b = b[:room]
	}
	if len(b) == 0 {
		return
	}
	if l.f == nil && len(l.mem)+len(b) <= l.inline {
		l.mem = append(l.mem, b...)
		l.size += int64(len(b))
		return
	}
	if l.f == nil {
		f, err := os.CreateTemp("", "hutch-exec-*.log")
		if err == nil {
			// The file needs no name: it is read through f alone.
			_ = os.Remove(f.Name())
			_, err = f.Write(l.mem)
		}
		if err != nil {
			if f != nil {
				f.Close()
			}
			l.err = err
			l.dropped += int64(len(b))
			return
		}
		l.f, l.mem = f, nil
	}
	if _, err := l.f.Write(b); err != nil {
		l.err = err
		l.dropped += int64(len(b))
		return
	}
	l.size += int64(len(b))
}

// stat returns the log's size and the bytes dropped from it.
func (l *execLog) stat() (size, dropped int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.size, l.dropped
}

// link marks the log as linked to and returns its size, and a function
// that writes its first size bytes (what the link serves).
func (l *execLog) link() (int64, func(ctx context.Context, w io.Writer) error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.linked = true
	size, f := l.size, l.f
	if f == nil {
		mem := l.mem[:size:size]
		return size, func(_ context.Context, w io.Writer) error {
			_, err := w.Write(mem)
			return err
		}
	}
	return size, func(ctx context.Context, w io.Writer) error {
		l.mu.Lock()
		removed := l.removed
		l.mu.Unlock()
		if removed {
			return errors.New("the log was removed")
		}
		// Reading by offset, the file's other readers and its writer
		// do not disturb one another; a close meanwhile fails the read.
		_, err := io.Copy(w, io.NewSectionReader(f, 0, size))
		return err
	}
}

// remove deletes the log.
func (l *execLog) remove() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.removed {
		return
	}
	l.removed = true
	l.mem = nil
	if l.f != nil {
		l.f.Close()
	}
}
