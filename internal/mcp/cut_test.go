package mcp

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestCutter writes streams in chunks of every size and checks that the
// head and tail kept are the stream's, that what was cut is counted, and
// that nothing is cut from a stream that fits.
func TestCutter(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, max := range []int{1, 2, 7, 64, 1000} {
		for _, size := range []int{0, 1, max / 2, max - 1, max, max + 1, 3 * max, 10*max + 3} {
			for _, chunk := range []int{1, 3, max, 2*max + 1} {
				data := make([]byte, size)
				for i := range data {
					data[i] = 'a' + byte(rng.IntN(26))
				}
				c := newCutter(max)
				for b := data; len(b) > 0; {
					n := min(chunk, len(b))
					c.Write(b[:n])
					b = b[n:]
				}
				if c.Len() != int64(size) {
					t.Fatalf("max %d size %d chunk %d: Len %d", max, size, chunk, c.Len())
				}
				head, tail, cut := c.take(true)
				if size <= max {
					if cut != 0 || !bytes.Equal(append(head, tail...), data) {
						t.Fatalf("max %d size %d chunk %d: got %q+%q cut %d, want it all", max, size, chunk, head, tail, cut)
					}
					continue
				}
				if len(head)+len(tail) != max || int64(len(head)+len(tail))+cut != int64(size) {
					t.Fatalf("max %d size %d chunk %d: kept %d+%d, cut %d", max, size, chunk, len(head), len(tail), cut)
				}
				if !bytes.HasPrefix(data, head) || !bytes.HasSuffix(data, tail) {
					t.Fatalf("max %d size %d chunk %d: head or tail not the stream's", max, size, chunk)
				}
				if c.Len() != 0 {
					t.Fatalf("take left %d bytes", c.Len())
				}
			}
		}
	}
}

// TestCutterUTF8 checks that a cut never splits a character, and that a
// character split between two takes comes out whole in the second.
func TestCutterUTF8(t *testing.T) {
	s := strings.Repeat("é€😀", 50)
	c := newCutter(31)
	c.Write([]byte(s))
	head, tail, cut := c.take(true)
	if !utf8.Valid(head) || !utf8.Valid(tail) {
		t.Fatalf("cut inside a character: %q / %q", head, tail)
	}
	if int64(len(head)+len(tail))+cut != int64(len(s)) {
		t.Fatalf("kept %d+%d, cut %d of %d", len(head), len(tail), cut, len(s))
	}
	if !strings.HasPrefix(s, string(head)) || !strings.HasSuffix(s, string(tail)) {
		t.Fatal("head or tail not the stream's")
	}

	c = newCutter(100)
	c.Write([]byte("ab\xf0\x9f"))
	head, tail, _ = c.take(false)
	if got := string(head) + string(tail); got != "ab" {
		t.Fatalf("first take %q, want %q", got, "ab")
	}
	c.Write([]byte("\x98\x80c"))
	head, tail, _ = c.take(false)
	if got := string(head) + string(tail); got != "😀c" {
		t.Fatalf("second take %q, want %q", got, "😀c")
	}
	c.Write([]byte("\xf0"))
	if head, _, _ = c.take(true); string(head) != "\xf0" {
		t.Fatalf("final take %q, want the lone byte", head)
	}
}

func TestJoinCut(t *testing.T) {
	if got := joinCut([]byte("ab"), []byte("cd"), 0, "http://x"); got != "abcd" {
		t.Errorf("uncut: %q", got)
	}
	got := joinCut([]byte("ab"), []byte("cd"), 42, "http://x/y")
	if !strings.HasPrefix(got, "ab\n") || !strings.HasSuffix(got, "\ncd") || !strings.Contains(got, "42 bytes cut") || !strings.Contains(got, "http://x/y") {
		t.Errorf("cut: %q", got)
	}
}

// fakeSession is a session of the table without a command: ended, or
// not.
func fakeSession(id, owner, sandbox string, ended bool) *session {
	s := &session{id: id, owner: owner, sandbox: sandbox, out: newCutter(10), ended: make(chan struct{})}
	if ended {
		close(s.ended)
	}
	return s
}

// TestExecTableOwners checks that a session is its owner's alone, that
// ended sessions not polled for IdleDrop are dropped while polled ones
// stay, and the bounds on running and kept sessions.
func TestExecTableOwners(t *testing.T) {
	now := time.Unix(1e9, 0)
	tab := NewExecTable(nil)
	tab.now = func() time.Time { return now }
	a := fakeSession("aaaa", "alice", "sb1", true)
	b := fakeSession("bbbb", "bob", "sb2", true)
	for _, s := range []*session{a, b} {
		if err := tab.add(s); err != nil {
			t.Fatal(err)
		}
	}
	if s, err := tab.get("alice", "aaaa"); err != nil || s != a {
		t.Fatalf("alice's own session: %v, %v", s, err)
	}
	for _, c := range []struct{ owner, id string }{{"bob", "aaaa"}, {"alice", "bbbb"}, {"", "aaaa"}, {"alice", "nope"}} {
		if _, err := tab.get(c.owner, c.id); !errors.Is(err, ErrNoSession) {
			t.Errorf("%s gets %s: %v, want ErrNoSession", c.owner, c.id, err)
		}
	}

	// alice polls at IdleDrop/2; bob never: bob's session is dropped.
	now = now.Add(IdleDrop / 2)
	if _, err := tab.get("alice", "aaaa"); err != nil {
		t.Fatal(err)
	}
	now = now.Add(IdleDrop/2 + time.Second)
	if !tab.sweep() {
		t.Fatal("sweep: the table looks empty")
	}
	if _, err := tab.get("bob", "bbbb"); !errors.Is(err, ErrNoSession) {
		t.Errorf("bob's idle session: %v, want dropped", err)
	}
	if _, err := tab.get("alice", "aaaa"); err != nil {
		t.Errorf("alice's polled session: %v", err)
	}

	// A running session is never dropped for idleness.
	r := fakeSession("rrrr", "alice", "sb1", false)
	if err := tab.add(r); err != nil {
		t.Fatal(err)
	}
	now = now.Add(10 * IdleDrop)
	tab.sweep()
	if _, err := tab.get("alice", "rrrr"); err != nil {
		t.Errorf("running session: %v", err)
	}
	if _, err := tab.get("alice", "aaaa"); !errors.Is(err, ErrNoSession) {
		t.Errorf("alice's idle session: %v, want dropped", err)
	}

	// At most MaxRunning running per owner; other owners are not held
	// back by it.
	for i := range MaxRunning - 1 {
		if err := tab.add(fakeSession(string(rune('A'+i%26))+time.Duration(i).String(), "alice", "sb1", false)); err != nil {
			t.Fatalf("running session %d: %v", i+2, err)
		}
	}
	if err := tab.add(fakeSession("one-more", "alice", "sb1", false)); err == nil || !strings.Contains(err.Error(), "running") {
		t.Errorf("running session %d: %v, want refused", MaxRunning+1, err)
	}
	bob2 := fakeSession("bob2", "bob", "sb2", false)
	if err := tab.add(bob2); err != nil {
		t.Errorf("bob's session: %v", err)
	}
	close(bob2.ended) // killing it needs no command

	// Ended sessions beyond MaxSessions go, least recently polled first.
	for i := range MaxSessions {
		now = now.Add(time.Second)
		if err := tab.add(fakeSession("ended"+time.Duration(i).String(), "alice", "sb1", true)); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for _, s := range tab.sessions {
		if s.owner == "alice" {
			n++
		}
	}
	if n != MaxSessions {
		t.Errorf("alice has %d sessions, want %d", n, MaxSessions)
	}
	if _, err := tab.get("alice", "ended"+time.Duration(0).String()); !errors.Is(err, ErrNoSession) {
		t.Errorf("oldest ended session: %v, want dropped", err)
	}

	// Killing a sandbox drops its sessions, of that owner only.
	tab.DropSandbox("alice", "sb2")
	if _, err := tab.get("bob", "bob2"); err != nil {
		t.Errorf("bob's session after alice's DropSandbox of sb2: %v", err)
	}
	tab.DropSandbox("bob", "sb2")
	if _, err := tab.get("bob", "bob2"); !errors.Is(err, ErrNoSession) {
		t.Errorf("bob's session after his sandbox was killed: %v", err)
	}
}

// TestExecLog checks the full log's bound and that a link serves what it
// held when published, from memory or from the file.
func TestExecLog(t *testing.T) {
	l := newExecLog(8)
	l.write([]byte("0123"))
	size, write := l.link()
	l.write([]byte("4567890abc")) // to the file now
	var b bytes.Buffer
	if err := write(t.Context(), &b); err != nil || b.String() != "0123" || size != 4 {
		t.Fatalf("link from memory: %q (%d), %v", b.String(), size, err)
	}
	size, write = l.link()
	l.write([]byte("more"))
	b.Reset()
	if err := write(t.Context(), &b); err != nil || b.String() != "01234567890abc" || size != 14 {
		t.Fatalf("link to the file: %q (%d), %v", b.String(), size, err)
	}
	l.remove()
	if err := write(t.Context(), &b); err == nil {
		t.Error("link to a removed log: no error")
	}
}
