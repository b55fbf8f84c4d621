package mcp

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// MaxLog bounds the full output of one command kept for its link: what
// comes beyond is counted and dropped.
const MaxLog = 64 << 20

// LogSpace is where the logs of exec's commands are kept on the host once
// they outgrow memory, and how many bytes they may take there together:
// hutch serve gives all its tenants' tables one, in its state directory,
// so that the sum of every tenant's MaxLogBytes never has to fit the
// host's temporary directory (often RAM); each table keeps its own bound
// inside it.
type LogSpace struct {
	dir    string
	budget logBudget
}

// NewLogSpace returns a space of max bytes in directory dir (the host's
// temporary directory when empty), which must exist; a log's file there
// has no name once created, so nothing is left behind by a crash.
func NewLogSpace(dir string, max int64) *LogSpace {
	return &LogSpace{dir: dir, budget: logBudget{max: max}}
}

// Used is how many bytes the logs in the space hold.
func (s *LogSpace) Used() int64 { return s.budget.used.Load() }

// logBudget bounds the bytes of some logs: a table's, within its space's
// (parent).
type logBudget struct {
	used   atomic.Int64
	max    int64
	parent *logBudget
}

// take takes up to n bytes of the budget (and its parent's) and returns
// how many it took.
func (b *logBudget) take(n int64) int64 {
	got := b.takeOwn(n)
	if b.parent != nil && got > 0 {
		if p := b.parent.take(got); p < got {
			b.used.Add(p - got)
			got = p
		}
	}
	return got
}

func (b *logBudget) takeOwn(n int64) int64 {
	for {
		used := b.used.Load()
		got := min(n, b.max-used)
		if got <= 0 {
			return 0
		}
		if b.used.CompareAndSwap(used, used+got) {
			return got
		}
	}
}

// give returns n bytes to the budget (and its parent).
func (b *logBudget) give(n int64) {
	b.used.Add(-n)
	if b.parent != nil {
		b.parent.give(n)
	}
}

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
	expires time.Time  // when kept for its link after its session
	budget  *logBudget // its table's, which its bytes are taken from
	dir     string     // its space's directory
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
	if l.budget != nil {
		got := l.budget.take(int64(len(b)))
		l.dropped += int64(len(b)) - got
		b = b[:got]
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
		f, err := os.CreateTemp(l.dir, "hutch-exec-*.log")
		if err == nil {
			// The file needs no name: it is read through f alone.
			_ = os.Remove(f.Name())
			_, err = f.Write(l.mem)
		}
		if err != nil {
			if f != nil {
				f.Close()
			}
			l.fail(err, len(b))
			return
		}
		l.f, l.mem = f, nil
	}
	if _, err := l.f.Write(b); err != nil {
		l.fail(err, len(b))
		return
	}
	l.size += int64(len(b))
}

// fail records err, of a write of n bytes that were dropped; l.mu is
// held.
func (l *execLog) fail(err error, n int) {
	l.err = err
	l.dropped += int64(n)
	if l.budget != nil {
		l.budget.give(int64(n))
	}
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
	if l.budget != nil {
		l.budget.give(l.size)
	}
	if l.f != nil {
		l.f.Close()
	}
}
