package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hutch-sandbox/hutch/internal/approve"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// TerminalAsker asks hutch's user on their terminal (/dev/tty, the
// controlling terminal of hutch, never the sandbox's pty): one question
// at a time, answered with one key. While the command runs on a pty of
// its own, the keys are taken from the relay (sandbox.TapTerminal), so
// none of the answer reaches the command.
type TerminalAsker struct {
	tty *os.File
	// always names where "allow always" writes ("" when it cannot).
	always string
	mu     sync.Mutex
}

// OpenTerminalAsker opens the controlling terminal; an error when there
// is none (no one to ask). always names where an "allow always" answer
// is written, shown with the choice; "" offers no such choice.
func OpenTerminalAsker(always string) (*TerminalAsker, error) {
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	if !sandbox.IsTerminal(tty) {
		tty.Close()
		return nil, errors.New("/dev/tty is not a terminal")
	}
	return &TerminalAsker{tty: tty, always: always}, nil
}

// Close closes the terminal.
func (t *TerminalAsker) Close() error { return t.tty.Close() }

// Ask implements approve.Asker.
func (t *TerminalAsker) Ask(ctx context.Context, r approve.Request) approve.Reply {
	t.mu.Lock()
	defer t.mu.Unlock()
	keys, release, tapped := sandbox.TapTerminal()
	if tapped {
		defer release()
	} else {
		restore, err := sandbox.RawTerminal(t.tty)
		if err != nil {
			return approve.Reply{Answer: approve.AnswerDeny, By: "nobody", Note: err.Error()}
		}
		defer restore()
		ch := make(chan []byte, 16)
		stop := make(chan struct{})
		done := make(chan struct{})
		defer func() {
			close(stop)
			// Wake the reader so that it lets go of the terminal.
			_ = t.tty.SetReadDeadline(time.Now())
			<-done
			_ = t.tty.SetReadDeadline(time.Time{})
		}()
		go func() {
			defer close(done)
			buf := make([]byte, 64)
			for {
				n, err := t.tty.Read(buf)
				if n > 0 {
					select {
					case ch <- append([]byte(nil), buf[:n]...):
					case <-stop:
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
		keys = ch
	}
	t.write(prompt(r, t.always, deadlineOf(ctx)))
	for {
		select {
		case <-ctx.Done():
			t.write("\r\nhutch: no answer in time: denied\r\n")
			return approve.Reply{Answer: approve.AnswerDeny, By: "timeout"}
		case k := <-keys:
			for _, c := range k {
				a, ok := keyAnswer(c, r.Kind, t.always != "")
				if !ok {
					continue
				}
				t.write(string(a) + "\r\n")
				return approve.Reply{Answer: a, By: "terminal"}
			}
		}
	}
}

func (t *TerminalAsker) write(s string) { _, _ = t.tty.WriteString(s) }

// keyAnswer maps a key to an answer: o(nce)/y, r(un), a(lways), d(eny)/n,
// and Ctrl-C or Ctrl-D for deny. A file question (a change set's apply,
// which happens once) is yes or no: y, or n and Enter for its default no.
func keyAnswer(c byte, kind approve.Kind, always bool) (approve.Answer, bool) {
	switch c {
	case 'o', 'O', 'y', 'Y':
		return approve.AnswerOnce, true
	case 'r', 'R':
		if kind != approve.KindFile {
			return approve.AnswerRun, true
		}
	case 'a', 'A':
		if always && kind != approve.KindFile {
			return approve.AnswerAlways, true
		}
	case 'd', 'D', 'n', 'N', 3, 4:
		return approve.AnswerDeny, true
	case '\r', '\n':
		if kind == approve.KindFile {
			return approve.AnswerDeny, true
		}
	}
	return "", false
}

func deadlineOf(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return time.Until(d).Round(time.Second)
	}
	return 0
}

// prompt is the question as the terminal shows it (raw mode: \r\n).
func prompt(r approve.Request, always string, left time.Duration) string {
	var b strings.Builder
	what := "run this command"
	switch r.Kind {
	case approve.KindNetwork:
		what = "let the sandbox connect to a host no rule allows"
	case approve.KindFile:
		what = "apply changes to these paths"
	}
	fmt.Fprintf(&b, "\r\nhutch: approval needed to %s", what)
	if r.Sandbox != "" {
		fmt.Fprintf(&b, " (sandbox %s)", r.Sandbox)
	}
	b.WriteString(":\r\n")
	for _, l := range strings.Split(printable(r.Subject), "\n") {
		fmt.Fprintf(&b, "    %s\r\n", l)
	}
	if r.Command != "" && r.Command != r.Subject {
		fmt.Fprintf(&b, "  the part that asks: %s\r\n", printable(r.Command))
	}
	switch {
	case r.Rule != "":
		fmt.Fprintf(&b, "  asked by %s\r\n", printable(r.Rule))
	case r.Reason != "":
		fmt.Fprintf(&b, "  asked because %s\r\n", printable(r.Reason))
	}
	if r.Kind == approve.KindFile {
		if left > 0 {
			fmt.Fprintf(&b, "  (denied in %s without an answer)\r\n", left)
		}
		b.WriteString("  apply them? [y/N] ")
		return b.String()
	}
	b.WriteString("  [o] allow once  [r] allow for this run  ")
	if always != "" {
		fmt.Fprintf(&b, "[a] allow always (adds it to %s)  ", always)
	}
	b.WriteString("[d] deny")
	if left > 0 {
		fmt.Fprintf(&b, "  (denied in %s without an answer)", left)
	}
	b.WriteString(" ? ")
	return b.String()
}

// printable replaces control characters (but newlines) so that a command
// line cannot move the cursor or rewrite the question on the terminal.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' {
			return r
		}
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return '?'
		}
		return r
	}, s)
}
