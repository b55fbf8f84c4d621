package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// fakeAgent is a scripted agent, for feeding a client what a real one
// never sends.
type fakeAgent struct {
	t    testing.TB
	conn net.Conn
	br   *bufio.Reader
}

func newFake(t testing.TB) (*Client, *fakeAgent) {
	a, b := net.Pipe()
	c := NewClient(a)
	t.Cleanup(func() {
		c.Close()
		b.Close()
	})
	return c, &fakeAgent{t: t, conn: b, br: bufio.NewReader(b)}
}

// send writes raw bytes; errors (the client hung up) are ignored.
func (f *fakeAgent) send(b ...[]byte) {
	for _, p := range b {
		if _, err := f.conn.Write(p); err != nil {
			return
		}
	}
}

func (f *fakeAgent) hello() { f.send(helloFrame(protocolVersion, defaultMaxFrame)) }

func helloFrame(version, maxFrame int) []byte {
	b, _ := jsonFrame(frameHello, 0, hello{Version: version, MaxFrame: maxFrame})
	return b
}

// request reads the next request, skipping other frames.
func (f *fakeAgent) request() (uint32, request) {
	for {
		fr, err := readFrame(f.br, defaultMaxFrame)
		if err != nil {
			f.t.Errorf("fake agent: read: %v", err)
			return 0, request{}
		}
		if fr.typ != frameRequest {
			continue
		}
		var m request
		if err := json.Unmarshal(fr.body, &m); err != nil {
			f.t.Errorf("fake agent: request: %v", err)
		}
		return fr.id, m
	}
}

// drain reads and drops whatever the client sends until it hangs up.
func (f *fakeAgent) drain() { go io.Copy(io.Discard, f.br) }

func raw(typ, stream byte, id uint32, body string) []byte {
	return encodeFrame(typ, stream, id, []byte(body))
}

func TestClientRejectsMalformedFrames(t *testing.T) {
	stat := func(c *Client) error { _, err := c.Stat(context.Background(), "/x"); return err }
	execWait := func(tty bool) func(c *Client) error {
		return func(c *Client) error {
			p, err := c.Exec(context.Background(), ExecRequest{Args: []string{"x"}, TTY: tty})
			if err != nil {
				return err
			}
			_, err = p.Wait()
			return err
		}
	}
	started := func(body string) func(f *fakeAgent) {
		return func(f *fakeAgent) {
			id, _ := f.request()
			f.send(raw(frameResponse, 0, id, `{"pid":42}`))
			f.send([]byte(body))
		}
	}
	answer := func(typ, stream byte, body string) func(f *fakeAgent) {
		return func(f *fakeAgent) {
			id, _ := f.request()
			f.send(raw(typ, stream, id, body))
		}
	}
	tests := []struct {
		name    string
		noHello bool
		call    func(*Client) error
		agent   func(*fakeAgent)
	}{
		{"oversized frame", false, stat, func(f *fakeAgent) { f.send([]byte{0x7f, 0xff, 0xff, 0xff}) }},
		{"frame shorter than its header", false, stat, func(f *fakeAgent) { f.send([]byte{0, 0, 0, 3, 1, 2, 3}) }},
		{"unknown frame type", false, stat, func(f *fakeAgent) { f.send(raw(99, 0, 0, "")) }},
		{"no hello", true, stat, func(f *fakeAgent) { f.send(raw(frameResponse, 0, 1, "{}")) }},
		{"other version", true, stat, func(f *fakeAgent) { f.send(helloFrame(2, defaultMaxFrame)) }},
		{"tiny frame limit", true, stat, func(f *fakeAgent) { f.send(helloFrame(protocolVersion, 10)) }},
		{"hello not JSON", true, stat, func(f *fakeAgent) { f.send(raw(frameHello, 0, 0, "hi")) }},
		{"second hello", false, stat, func(f *fakeAgent) { f.hello() }},
		{"response not JSON", false, stat, answer(frameResponse, 0, "{")},
		{"unknown error code", false, stat, answer(frameResponse, 0, `{"error":{"code":"weird","message":"x"}}`)},
		{"stat without info", false, stat, answer(frameResponse, 0, `{}`)},
		{"name with a slash", false, stat, answer(frameResponse, 0, `{"info":{"name":"a/b"}}`)},
		{"name too long", false, stat, answer(frameResponse, 0, `{"info":{"name":"`+strings.Repeat("n", 300)+`"}}`)},
		{"negative size", false, stat, answer(frameResponse, 0, `{"info":{"name":"x","size":-1}}`)},
		{"bad base64 name", false, stat, answer(frameResponse, 0, `{"info":{"name":{"b":"!!"}}}`)},
		{"name object without b", false, stat, answer(frameResponse, 0, `{"info":{"name":{}}}`)},
		{"exit for a stat", false, stat, answer(frameExit, 0, `{"code":0,"signal":0}`)},
		{"entries for a stat", false, stat, answer(frameEntries, 0, `[]`)},
		{"data for a stat", false, stat, answer(frameData, streamOut, "x")},
		{"credit for a stat", false, stat, answer(frameCredit, streamIn, "\x00\x00\x00\x01")},
		{"short credit", false, stat, answer(frameCredit, streamIn, "\x00\x01")},
		{"credit on stream 1", false, stat, answer(frameCredit, streamOut, "\x00\x00\x00\x01")},
		{"eof with a body", false, stat, answer(frameEOF, streamOut, "x")},
		{"data on stream 0", false, stat, answer(frameData, streamIn, "x")},
		{"data on stream 7", false, stat, answer(frameData, 7, "x")},
		{"exec pid 0", false, execWait(false), answer(frameResponse, 0, `{"pid":0}`)},
		{"exec pid too large", false, execWait(false), answer(frameResponse, 0, `{"pid":99999999}`)},
		{"exit code out of range", false, execWait(false), started(string(raw(frameExit, 0, 1, `{"code":300,"signal":0}`)))},
		{"exit signal out of range", false, execWait(false), started(string(raw(frameExit, 0, 1, `{"code":0,"signal":-1}`)))},
		{"exit not JSON", false, execWait(false), started(string(raw(frameExit, 0, 1, `[`)))},
		{"stderr of a tty", false, execWait(true), started(string(raw(frameData, streamErr, 1, "x")))},
		{"data after eof", false, execWait(false), started(string(raw(frameEOF, streamOut, 1, "")) + string(raw(frameData, streamOut, 1, "x")))},
		{"window exceeded", false, execWait(false), started(strings.Repeat(string(raw(frameData, streamOut, 1, strings.Repeat("z", maxChunk))), window/maxChunk+1))},
	}
	// What breaks the connection itself — its framing, its handshake, a
	// frame of a type no request has — ends it; anything else is of one
	// request, which alone fails (Client.breach): the next request is
	// answered.
	whole := map[string]bool{
		"oversized frame": true, "frame shorter than its header": true, "unknown frame type": true, "no hello": true,
		"other version": true, "tiny frame limit": true, "hello not JSON": true, "second hello": true,
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, f := newFake(t)
			logs := &testutil.Buffer{}
			c.SetLog(slog.New(slog.NewTextHandler(logs, nil)))
			go func() {
				if !tt.noHello {
					f.hello()
				}
				tt.agent(f)
				if !whole[tt.name] {
					id, _ := f.request()
					f.send(raw(frameResponse, 0, id, `{"info":{"name":"next","size":3}}`))
				}
				f.drain()
			}()
			errc := make(chan error, 1)
			go func() { errc <- tt.call(c) }()
			select {
			case err := <-errc:
				if !errors.Is(err, ErrProtocol) {
					t.Errorf("call returned %v, want an error wrapping ErrProtocol", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("call still running 5s after a malformed frame")
			}
			if !whole[tt.name] {
				if fi, err := c.Stat(context.Background(), "/next"); err != nil || fi.Name != "next" {
					t.Fatalf("the next request after a malformed frame of another: %+v, %v", fi, err)
				}
				if err := c.Err(); err != nil {
					t.Errorf("a malformed frame of one request ended the connection: %v", err)
				}
				if !strings.Contains(logs.String(), "broke the protocol in one request") {
					t.Errorf("nothing logged: %q", logs.String())
				}
				return
			}
			<-c.Done()
			if !errors.Is(c.Err(), ErrProtocol) {
				t.Errorf("Err() = %v", c.Err())
			}
			if !tt.noHello && !strings.Contains(logs.String(), "its connection ends") {
				t.Errorf("nothing logged: %q", logs.String())
			}
		})
	}
}

func TestClientConnectionLost(t *testing.T) {
	c, f := newFake(t)
	go func() {
		f.hello()
		f.request()
		f.send([]byte{0, 0, 1, 0, 4}) // a frame cut short
		f.conn.Close()
	}()
	_, err := c.Stat(context.Background(), "/x")
	if !errors.Is(err, ErrClosed) || errors.Is(err, ErrProtocol) {
		t.Errorf("stat on a lost connection: %v", err)
	}
}

func TestClientIgnoresUnknownIDs(t *testing.T) {
	c, f := newFake(t)
	go func() {
		f.hello()
		id, m := f.request()
		if m.Op != opStat || string(m.Path) != "/x" {
			t.Errorf("request %+v", m)
		}
		for _, other := range []uint32{id + 100, 0} {
			f.send(
				raw(frameData, streamOut, other, "x"),
				raw(frameEOF, streamErr, other, ""),
				raw(frameExit, 0, other, `{"code":1,"signal":0}`),
				raw(frameCredit, streamIn, other, "\x00\x00\x00\x01"),
				raw(frameEntries, 0, other, `[]`),
				raw(frameResponse, 0, other, `{}`),
			)
		}
		f.send(raw(frameResponse, 0, id, `{"info":{"name":"x","size":3,"mode":420},"unknown_field":1}`))
		f.send(raw(frameResponse, 0, id, `{"info":{"name":"again"}}`)) // a second answer: ignored
		f.drain()
	}()
	fi, err := c.Stat(context.Background(), "/x")
	if err != nil || fi.Name != "x" || fi.Size != 3 || fi.Mode != 0o644 {
		t.Fatalf("stat: %+v, %v", fi, err)
	}
	if _, err := c.Stat(context.Background(), "relative"); err == nil {
		t.Error("relative path accepted")
	}
	if err := c.Err(); err != nil {
		t.Errorf("connection failed: %v", err)
	}
}

func TestErrorMessageBounded(t *testing.T) {
	c, f := newFake(t)
	go func() {
		f.hello()
		id, _ := f.request()
		f.send(raw(frameResponse, 0, id, `{"error":{"code":"not_found","message":"`+strings.Repeat("m", 100<<10)+`"}}`))
		f.drain()
	}()
	_, err := c.Stat(context.Background(), "/x")
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeNotFound || len(e.Message) > maxMessage+8 {
		t.Errorf("error %T with a %d-byte message", err, len(err.Error()))
	}
}

func TestWireString(t *testing.T) {
	for _, s := range []string{"", "plain", "ünïcode", "bad\xff\xfe", "\x00nul"} {
		b, err := json.Marshal(wstr(s))
		if err != nil {
			t.Fatal(err)
		}
		var back wstr
		if err := json.Unmarshal(b, &back); err != nil || string(back) != s {
			t.Errorf("%q → %s → %q, %v", s, b, back, err)
		}
	}
}

// FuzzClient feeds a client arbitrary bytes after a valid hello: whatever
// they are, its calls end (with an error or a result) and it never panics.
func FuzzClient(f *testing.F) {
	okStat := raw(frameResponse, 0, 1, `{"info":{"name":"x","size":1}}`)
	execRun := bytes.Join([][]byte{
		raw(frameResponse, 0, 1, `{"pid":7}`),
		raw(frameData, streamOut, 1, "hello"),
		raw(frameEOF, streamOut, 1, ""),
		raw(frameEOF, streamErr, 1, ""),
		raw(frameExit, 0, 1, `{"code":3,"signal":0}`),
	}, nil)
	list := bytes.Join([][]byte{
		raw(frameEntries, 0, 1, `[{"name":"a","size":1,"mode":420},{"name":{"b":"/w=="}}]`),
		raw(frameResponse, 0, 1, `{}`),
	}, nil)
	read := bytes.Join([][]byte{raw(frameData, streamOut, 1, "abc"), raw(frameResponse, 0, 1, `{"size":3}`)}, nil)
	for op := range byte(4) {
		for _, seed := range [][]byte{okStat, execRun, list, read, {0, 0, 0, 7, frameData, 1, 0, 0, 0, 1, 'x'}} {
			f.Add(append([]byte{op}, seed...))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		c, fa := newFake(t)
		go func() {
			fa.hello()
			fa.request()
			fa.drain()
			fa.send(data[1:])
			fa.conn.Close()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		switch data[0] % 4 {
		case 0:
			c.Stat(ctx, "/x")
		case 1:
			if p, err := c.Exec(ctx, ExecRequest{Args: []string{"x"}, Stdin: true}); err == nil {
				go io.Copy(io.Discard, p.Stderr)
				io.Copy(io.Discard, p.Stdout)
				p.Stdin.Write([]byte("in"))
				p.Wait()
			}
		case 2:
			c.List(ctx, "/x")
		case 3:
			c.ReadFile(ctx, "/x", io.Discard)
		}
		if ctx.Err() != nil {
			t.Fatal("client call did not end")
		}
		c.Close()
	})
}

// TestFrameLimits checks the frame reader's bounds.
func TestFrameLimits(t *testing.T) {
	var b bytes.Buffer
	b.Write(encodeFrame(frameData, 1, 9, make([]byte, 100)))
	if f, err := readFrame(bufio.NewReader(bytes.NewReader(b.Bytes())), headerSize+100); err != nil || f.id != 9 || len(f.body) != 100 {
		t.Errorf("frame at the limit: %+v, %v", f, err)
	}
	if _, err := readFrame(bufio.NewReader(bytes.NewReader(b.Bytes())), headerSize+99); !errors.Is(err, ErrProtocol) {
		t.Errorf("frame over the limit: %v", err)
	}
	short := b.Bytes()[:50]
	if _, err := readFrame(bufio.NewReader(bytes.NewReader(short)), 1<<20); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut frame: %v", err)
	}
	if _, err := readFrame(bufio.NewReader(bytes.NewReader(nil)), 1<<20); err != io.EOF {
		t.Errorf("no frame: %v", err)
	}
	var lb [4]byte
	binary.BigEndian.PutUint32(lb[:], headerSize-1)
	if _, err := readFrame(bufio.NewReader(bytes.NewReader(lb[:])), 1<<20); !errors.Is(err, ErrProtocol) {
		t.Errorf("frame without a header: %v", err)
	}
}

func TestServeOptionsValidate(t *testing.T) {
	for _, o := range []ServeOptions{{MaxFrame: 100}, {DefaultDir: "rel"}} {
		if o.Validate() == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	for _, o := range []ServeOptions{{}, {MaxFrame: minMaxFrame, DefaultDir: "/workspace"}} {
		if err := o.Validate(); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
}

// TestServeRejectsMalformedFrames: the agent trusts the daemon, but a frame
// it cannot parse still ends Serve with an error, never a panic.
func TestServeRejectsMalformedFrames(t *testing.T) {
	write := func(id uint32) []byte {
		b, _ := jsonFrame(frameRequest, id, request{Op: opWrite, Path: wstr(t.TempDir() + "/f")})
		return b
	}
	// A command that never reads its stdin: the pipe takes a chunk or two,
	// the rest stays queued.
	sleeper, _ := jsonFrame(frameRequest, 1, request{Op: opExec, Args: []wstr{"sleep", "100"}, Stdin: true})
	tests := []struct {
		name   string
		frames [][]byte
	}{
		{"oversized frame", [][]byte{{0x00, 0x20, 0x00, 0x00}}},
		{"unknown frame type", [][]byte{raw(42, 0, 1, "")}},
		{"data on stream 1", [][]byte{raw(frameData, streamOut, 1, "x")}},
		{"short credit", [][]byte{raw(frameCredit, streamOut, 1, "\x00")}},
		{"window exceeded", append([][]byte{sleeper}, slices.Repeat([][]byte{raw(frameData, streamIn, 1, strings.Repeat("d", maxChunk))}, 2*window/maxChunk)...)},
		{"data after eof", [][]byte{write(1), raw(frameEOF, streamIn, 1, ""), raw(frameData, streamIn, 1, "late")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			errc := make(chan error, 1)
			go func() { errc <- Serve(b, ServeOptions{}) }()
			go io.Copy(io.Discard, a)
			for _, f := range tt.frames {
				if _, err := a.Write(f); err != nil {
					break
				}
			}
			select {
			case err := <-errc:
				if !errors.Is(err, ErrProtocol) {
					t.Errorf("Serve returned %v, want an error wrapping ErrProtocol", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Serve still running after a malformed frame")
			}
		})
	}
}
