package egress

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// check decides a destination of the sandbox's connection c, which br
// reads: the rules' verdict, and for a destination that no rule allows
// (Verdict.Unknown), when Unknown is set, the verdict after asking it
// while c is held. A refusal by Unknown is Verdict.Unknown's verdict with
// the reason "not approved: …"; an approval is ResolveApproved's verdict,
// which the deny rules and the address guard still decide.
//
// While the question waits, c's read deadline is cleared and a read
// through br watches for the sandbox hanging up, which withdraws the
// question; what the read takes stays in br, and c's read deadline is
// cleared when check returns.
func (p *Proxy) check(c net.Conn, br *bufio.Reader, host string, port int) Verdict {
	v := p.resolve(host, port, false)
	if v.Allowed || !v.Unknown || p.Unknown == nil {
		return v
	}
	ctx, stop := p.hold(c, br)
	err := p.Unknown(ctx, v.Host, v.Port)
	hungUp := stop()
	switch {
	case err == nil:
		return p.resolve(host, port, true)
	case hungUp:
		v.Reason = "not approved: the sandbox closed the connection before an answer"
	default:
		v.Reason = notApproved(err)
	}
	return v
}

// notApproved is the reason of a refusal that Unknown answered with err.
func notApproved(err error) string {
	msg := err.Error()
	if !strings.Contains(msg, "not approved") {
		msg = "not approved: " + msg
	}
	return msg
}

// hold watches the sandbox's connection c, which br reads, while a
// question about it waits: the context it returns ends when the proxy
// closes or a read through br ends in an error (the sandbox hung up, or
// the proxy closed c). stop ends the watch, leaves what the read took in
// br and c's read deadline cleared, and reports whether the read failed.
// A sandbox that sends more before the answer (a pipelined request body,
// a TLS hello) ends the watch without an error: it is then not watched
// for hanging up.
func (p *Proxy) hold(c net.Conn, br *bufio.Reader) (ctx context.Context, stop func() (hungUp bool)) {
	ctx, cancel := context.WithCancel(p.baseContext())
	var failed atomic.Bool
	done := make(chan struct{})
	_ = c.SetReadDeadline(time.Time{})
	p.goTracked(func() {
		defer close(done)
		if _, err := br.Peek(1); err != nil && !deadlineError(err) {
			failed.Store(true)
			cancel()
		}
	})
	return ctx, func() bool {
		// A deadline in the past ends the read at once.
		_ = c.SetReadDeadline(time.Unix(1, 0))
		<-done
		_ = c.SetReadDeadline(time.Time{})
		cancel()
		return failed.Load()
	}
}

// deadlineError reports whether err ended a read at its deadline: the
// os package's error, or a connection's of its own that says it timed out
// (a yamux stream's, the microVM tier's relayed connections).
func deadlineError(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}
