package approve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"sync"
	"time"
)

// Pending is a question waiting in a Broker for its answer.
type Pending struct {
	ID string `json:"id"`
	Request
	Created time.Time `json:"created"`
	// Expires is when the question is refused if no one answers.
	Expires time.Time `json:"expires"`
}

// ErrNotPending is Broker.Answer's error for an id that is not waiting
// (never was, answered, expired).
var ErrNotPending = errors.New("no such pending approval")

// MaxPending bounds the questions a Broker holds at once; one more is
// refused at once (By "nobody"), so that a sandbox cannot pile them up.
const MaxPending = 1024

// Broker holds questions until someone answers them through Answer (an
// API, a web page) or an Asker put in the question's context with
// WithAsker (an MCP client's elicitation), whichever answers first; the
// question's context ending (Gate.Timeout) refuses it. A Broker is an
// Asker; it is safe for concurrent use.
type Broker struct {
	// Notify is told of every question when it starts waiting (reply
	// nil) and when it ends (its reply); called without the Broker's lock,
	// from the asking goroutine. Nil drops them.
	Notify func(p Pending, reply *Reply)

	mu      sync.Mutex
	pending map[string]*waiting
}

type waiting struct {
	p    Pending
	done chan Reply // buffered 1: the first answer
}

// answer hands r to the question once; false when it already had one.
func (w *waiting) answer(r Reply) bool {
	select {
	case w.done <- r:
		return true
	default:
		return false
	}
}

type askerKey struct{}

// WithAsker returns a context whose questions a Broker also puts to a,
// racing its other ways of being answered.
func WithAsker(ctx context.Context, a Asker) context.Context {
	return context.WithValue(ctx, askerKey{}, a)
}

// Ask implements Asker: it waits for an answer through Answer, the
// context's Asker (WithAsker), or the context's end.
func (b *Broker) Ask(ctx context.Context, r Request) Reply {
	id := newID()
	now := time.Now()
	w := &waiting{p: Pending{ID: id, Request: r, Created: now, Expires: now.Add(DefaultTimeout)}, done: make(chan Reply, 1)}
	if d, ok := ctx.Deadline(); ok {
		w.p.Expires = d
	}
	b.mu.Lock()
	if len(b.pending) >= MaxPending {
		b.mu.Unlock()
		return Reply{Answer: AnswerDeny, By: "nobody", Note: "too many approvals are waiting"}
	}
	if b.pending == nil {
		b.pending = map[string]*waiting{}
	}
	b.pending[id] = w
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.pending, id)
		b.mu.Unlock()
	}()
	if b.Notify != nil {
		b.Notify(w.p, nil)
	}
	if a, ok := ctx.Value(askerKey{}).(Asker); ok && a != nil {
		actx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			rep := a.Ask(actx, r)
			if actx.Err() == nil && rep.Answer != "" {
				w.answer(rep)
			}
		}()
	}
	var reply Reply
	select {
	case reply = <-w.done:
	case <-ctx.Done():
		reply = Reply{Answer: AnswerDeny, By: "timeout"}
		// An answer that came at the same moment wins.
		select {
		case reply = <-w.done:
		default:
		}
	}
	if b.Notify != nil {
		b.Notify(w.p, &reply)
	}
	return reply
}

// Answer answers the question id; by says who ("api", "web").
func (b *Broker) Answer(id string, a Answer, by string) error {
	if _, err := ParseAnswer(string(a)); err != nil {
		return err
	}
	b.mu.Lock()
	w := b.pending[id]
	b.mu.Unlock()
	if w == nil || !w.answer(Reply{Answer: a, By: by}) {
		return ErrNotPending
	}
	return nil
}

// Get returns the question id while it waits.
func (b *Broker) Get(id string) (Pending, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.pending[id]
	if w == nil {
		return Pending{}, false
	}
	return w.p, true
}

// List returns the waiting questions keep selects (nil: all), oldest
// first.
func (b *Broker) List(keep func(Pending) bool) []Pending {
	b.mu.Lock()
	out := make([]Pending, 0, len(b.pending))
	for _, w := range b.pending {
		if keep == nil || keep(w.p) {
			out = append(out, w.p)
		}
	}
	b.mu.Unlock()
	slices.SortFunc(out, func(x, y Pending) int {
		if c := x.Created.Compare(y.Created); c != 0 {
			return c
		}
		return compareStrings(x.ID, y.ID)
	})
	return out
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func newID() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return "apr_" + hex.EncodeToString(b[:])
}
