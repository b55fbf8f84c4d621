package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// waitFor polls cond until it holds, failing the test after a generous
// guard.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDetachAttach: a detach ends the client's calls but not the commands
// they run (a command waiting on its stdin gets its end, one that writes
// goes on, its output dropped); an attach on the same connection starts a
// new session whose request ids are above the old ones, and another
// detach and attach work the same way.
func TestDetachAttach(t *testing.T) {
	noLeaks(t)
	dir := t.TempDir()
	c, s := agentPair(t, ServeOptions{DefaultDir: dir, DefaultEnv: []string{"PATH=" + os.Getenv("PATH")}}, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	counter, err := c.Exec(ctx, ExecRequest{Args: []string{"sh", "-c", "i=0; while :; do i=$((i+1)); echo $i; echo $i >count.new; mv count.new count; sleep 0.02; done"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, ExecRequest{Args: []string{"sh", "-c", "cat >/dev/null; echo done >cat-done"}, Stdin: true}); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		b, _ := os.ReadFile(filepath.Join(dir, "count"))
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return n
	}
	waitFor(t, "the counter starts", func() bool { return count() > 0 })

	conn, err := c.Detach(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, ExecRequest{Args: []string{"true"}}); !errors.Is(err, ErrClosed) {
		t.Errorf("exec on the detached client: %v, want ErrClosed", err)
	}
	if _, err := counter.Wait(); !errors.Is(err, ErrClosed) {
		t.Errorf("wait on a command of the detached client: %v, want ErrClosed", err)
	}
	if _, err := io.ReadAll(counter.Stdout); !errors.Is(err, ErrClosed) {
		t.Errorf("output of a command of the detached client: %v, want ErrClosed", err)
	}
	// The commands go on: the counter counts, the reader's stdin ended.
	at := count()
	waitFor(t, "the counter goes on while detached", func() bool { return count() > at })
	waitFor(t, "the reader's stdin ends", func() bool {
		_, err := os.Stat(filepath.Join(dir, "cat-done"))
		return err == nil
	})

	for round := range 2 {
		c2, err := Attach(conn)
		if err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		seen := s.maxID
		s.mu.Unlock()
		got := run(t, c2, ExecRequest{Args: []string{"sh", "-c", "echo hello; cat count"}}, "")
		if !strings.HasPrefix(got.stdout, "hello\n") || got.status != (ExitStatus{}) {
			t.Errorf("round %d: exec after attach: %+v", round, got)
		}
		s.mu.Lock()
		now := s.maxID
		s.mu.Unlock()
		if now <= seen {
			t.Errorf("round %d: the new session's request id %d is not above the old ones (%d)", round, now, seen)
		}
		if round == 1 {
			t.Cleanup(func() { c2.Close() })
			break
		}
		if conn, err = c2.Detach(ctx); err != nil {
			t.Fatal(err)
		}
	}
	at = count()
	waitFor(t, "the counter goes on after attach", func() bool { return count() > at })
}

// TestAttachNotDetached: an attach frame on a connection that was not
// detached breaks the protocol: the agent ends the connection.
func TestAttachNotDetached(t *testing.T) {
	noLeaks(t)
	a, b := socketPair(t)
	errc := make(chan error, 1)
	go func() { errc <- Serve(b, ServeOptions{Log: testLog(t)}) }()
	defer a.Close()
	if _, err := a.Write(encodeFrame(frameAttach, 0, 0, nil)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, ErrProtocol) {
			t.Errorf("Serve: %v, want ErrProtocol", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not end")
	}
}

// TestAttachClockAndSeed: an attach tells the agent the client's clock
// (SetClock) and random bytes (Reseed), different at each attach.
func TestAttachClockAndSeed(t *testing.T) {
	noLeaks(t)
	clocks, seeds := make(chan time.Time, 2), make(chan []byte, 2)
	c, _ := agentPair(t, ServeOptions{
		SetClock: func(t time.Time) { clocks <- t },
		Reseed:   func(b []byte) { seeds <- bytes.Clone(b) },
	}, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got [][]byte
	for range 2 {
		conn, err := c.Detach(ctx)
		if err != nil {
			t.Fatal(err)
		}
		before := time.Now()
		if c, err = Attach(conn); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Usage(ctx); err != nil {
			t.Fatal(err)
		}
		if at := <-clocks; at.Before(before) || at.After(time.Now()) {
			t.Errorf("the attach's clock %v is not the client's (%v on)", at, before)
		}
		got = append(got, <-seeds)
	}
	t.Cleanup(func() { c.Close() })
	if len(got[0]) != attachSeed || bytes.Equal(got[0], got[1]) || bytes.Equal(got[0], make([]byte, attachSeed)) {
		t.Errorf("the attaches' random bytes: %x and %x, want %d random bytes each", got[0], got[1], attachSeed)
	}
}
