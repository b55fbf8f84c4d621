package sandbox

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAgentSocket: the agent's socket of a sandbox that outlives hutch is
// made mode 0600 (over a stale one), and a connection to it sends the
// token on the authentication line first.
func TestAgentSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.sock")
	if err := os.WriteFile(path, nil, 0o644); err != nil { // a stale one
		t.Fatal(err)
	}
	f, err := listenAgent(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if st, err := os.Lstat(path); err != nil || st.Mode().Type() != os.ModeSocket || st.Mode().Perm() != 0o600 {
		t.Fatalf("agent socket: %v, %v; want a socket, mode 0600", st, err)
	}
	if f.Fd() <= 2 {
		t.Errorf("listener on descriptor %d, want above the standard ones", f.Fd())
	}
	l, err := net.FileListener(f)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan string, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadString('\n')
		got <- line
	}()
	c, err := DialAgent(path, "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if line := <-got; line != AgentAuthPrefix+"s3cret\n" {
		t.Errorf("authentication line %q", line)
	}
}

// BenchmarkAgentSocket is what a sandbox that outlives hutch adds to a
// start: its agent's socket made, and a connection to it authenticated
// (the agent's accept and hello aside).
func BenchmarkAgentSocket(b *testing.B) {
	path := filepath.Join(b.TempDir(), "agent.sock")
	for b.Loop() {
		f, err := listenAgent(path)
		if err != nil {
			b.Fatal(err)
		}
		c, err := DialAgent(path, strings.Repeat("t", 64))
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
		f.Close()
	}
}
