package ocitest

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// WaitAgent connects to the agent of a container (dev.hutch.agent) through
// dial with token (over TLS when tc is not nil), trying again until it
// answers: the container's engine reports it started before the agent
// listens. It fails the test after two minutes; the test's end closes
// the client.
func WaitAgent(t testing.TB, ctx context.Context, dial func(context.Context) (net.Conn, error), token string, tc *tls.Config) *agent.Client {
	t.Helper()
	var client *agent.Client
	var last error
	if !testutil.Eventually(2*time.Minute, func() bool {
		cl, err := agent.DialListener(ctx, dial, token, tc)
		if err == nil {
			if _, err = cl.Stat(ctx, "/"); err != nil {
				cl.Close()
			}
		}
		if last = err; err != nil {
			return false
		}
		client = cl
		return true
	}) {
		t.Fatalf("no agent: %v", last)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

// AgentRun runs the shell script through the agent's client c, as user
// (the agent's own when nil), and returns its output (stdout, then
// stderr) and how it ended.
func AgentRun(t testing.TB, ctx context.Context, c *agent.Client, user *agent.Credential, script string) (string, agent.ExitStatus) {
	t.Helper()
	p, err := c.Exec(ctx, agent.ExecRequest{Args: []string{"sh", "-c", script}, User: user, Timeout: time.Minute})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	var stderr strings.Builder
	done := make(chan struct{})
	go func() { io.Copy(&stderr, p.Stderr); close(done) }()
	out, _ := io.ReadAll(p.Stdout)
	<-done
	st, err := p.Wait()
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return string(out) + stderr.String(), st
}
