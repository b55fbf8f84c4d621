package api

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/execproto"
)

// run runs a command to completion through the API.
func (e *testEnv) run(t *testing.T, id string, body any) RunResult {
	t.Helper()
	resp, data := e.request(t, "POST", "/v1/sandboxes/"+id+"/exec", body)
	want(t, resp, data, 200, "")
	var res RunResult
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	return res
}

func TestExecRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxOutput: 100}, OriginLocal)
	info := e.create(t, nil)
	id := info.ID

	res := e.run(t, id, `{"args":["sh","-c","echo out; echo err >&2; exit 3"]}`)
	if res.Stdout != "out\n" || res.Stderr != "err\n" || res.ExitCode != 3 || res.Signal != 0 || res.TimedOut || res.Truncated || res.PID <= 0 {
		t.Errorf("exit 3: %+v", res)
	}
	res = e.run(t, id, `{"args":["sh","-c","pwd; echo $GREETING"],"env":{"GREETING":"hi"}}`)
	if res.Stdout != info.Workspace+"\nhi\n" {
		t.Errorf("cwd and env: %q", res.Stdout)
	}
	res = e.run(t, id, `{"args":["pwd"],"cwd":"/"}`)
	if res.Stdout != "/\n" {
		t.Errorf("cwd /: %q", res.Stdout)
	}
	res = e.run(t, id, `{"args":["cat"],"input":"hello"}`)
	if res.Stdout != "hello" {
		t.Errorf("input: %q", res.Stdout)
	}
	res = e.run(t, id, `{"args":["od","-An","-tx1"],"input_b64":"AP8="}`)
	if strings.TrimSpace(res.Stdout) != "00 ff" {
		t.Errorf("input_b64: %q", res.Stdout)
	}
	res = e.run(t, id, `{"args":["printf","a\\377b"]}`)
	if res.Stdout != "" || string(res.StdoutB64) != "a\xffb" {
		t.Errorf("output that is not UTF-8: %+v", res)
	}
	res = e.run(t, id, `{"args":["seq","1","1000"]}`)
	if !res.Truncated || len(res.Stdout) != 100 || !strings.HasPrefix(res.Stdout, "1\n2\n") || res.ExitCode != 0 {
		t.Errorf("over the output limit: truncated %v, %d bytes, exit %d", res.Truncated, len(res.Stdout), res.ExitCode)
	}
	res = e.run(t, id, `{"args":["sleep","10"],"timeout":"200ms"}`)
	if !res.TimedOut || res.Signal != 9 || res.ExitCode != 137 {
		t.Errorf("timeout: %+v", res)
	}
	res = e.run(t, id, `{"args":["sh","-c","kill -TERM $$"]}`)
	if res.Signal != 15 || res.ExitCode != 143 {
		t.Errorf("killed by a signal: %+v", res)
	}
	res = e.run(t, id, `{"args":["sh","-c","tty; echo on the terminal >&2"],"tty":true}`)
	if !strings.HasPrefix(res.Stdout, "/dev/pts/") || !strings.Contains(res.Stdout, "on the terminal") || res.Stderr != "" {
		t.Errorf("tty: %+v", res)
	}

	// A process left in the background holds the output open; the result
	// comes anyway.
	start := time.Now()
	res = e.run(t, id, `{"args":["sh","-c","sleep 600 & echo done"]}`)
	if res.Stdout != "done\n" || time.Since(start) > 2*time.Minute {
		t.Errorf("background process: %+v after %s", res, time.Since(start))
	}

	resp, data := e.request(t, "POST", "/v1/sandboxes/"+id+"/exec", `{"args":["no-such-command-here"]}`)
	want(t, resp, data, 404, CodeNotFound, "command not found")
}

// rawStream is a client's end of an exec stream, frame by frame.
type rawStream struct {
	conn net.Conn
	br   *bufio.Reader
	pid  int
}

// openStream asks for an exec stream and checks the 101.
func (e *testEnv) openStream(t *testing.T, id, body string) *rawStream {
	t.Helper()
	conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "POST /v1/sandboxes/%s/exec HTTP/1.1\r\nHost: hutch\r\nConnection: Upgrade\r\nUpgrade: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		id, execproto.Protocol, len(body), body)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		data, _ := io.ReadAll(resp.Body)
		t.Fatalf("exec stream: %s %s", resp.Status, data)
	}
	if resp.Header.Get("Upgrade") != execproto.Protocol {
		t.Errorf("Upgrade: %q", resp.Header.Get("Upgrade"))
	}
	pid, err := strconv.Atoi(resp.Header.Get(execproto.PIDHeader))
	if err != nil || pid <= 0 {
		t.Fatalf("%s: %q", execproto.PIDHeader, resp.Header.Get(execproto.PIDHeader))
	}
	return &rawStream{conn: conn, br: br, pid: pid}
}

func (s *rawStream) send(t *testing.T, typ byte, payload []byte) {
	t.Helper()
	if err := execproto.Write(s.conn, typ, payload); err != nil {
		t.Fatal(err)
	}
}

// finish reads frames until the last one and returns the output and it;
// the daemon must then close the connection.
func (s *rawStream) finish(t *testing.T) (stdout, stderr string, last execproto.Frame) {
	t.Helper()
	var out, errOut strings.Builder
	for {
		f, err := execproto.Read(s.br, execproto.MaxPayload)
		if err != nil {
			t.Fatalf("read a frame: %v (stdout so far %q)", err, out.String())
		}
		switch f.Type {
		case execproto.TypeStdout:
			out.Write(f.Payload)
		case execproto.TypeStderr:
			errOut.Write(f.Payload)
		case execproto.TypeExit, execproto.TypeError:
			if _, err := execproto.Read(s.br, execproto.MaxPayload); err != io.EOF {
				t.Errorf("after the last frame: %v, want EOF", err)
			}
			return out.String(), errOut.String(), f
		default:
			t.Fatalf("frame of type %d from the daemon", f.Type)
		}
	}
}

func exitOf(t *testing.T, f execproto.Frame) execproto.Exit {
	t.Helper()
	if f.Type != execproto.TypeExit {
		t.Fatalf("last frame of type %d: %s", f.Type, f.Payload)
	}
	var x execproto.Exit
	if err := json.Unmarshal(f.Payload, &x); err != nil {
		t.Fatal(err)
	}
	return x
}

func errorOf(t *testing.T, f execproto.Frame) execproto.Error {
	t.Helper()
	if f.Type != execproto.TypeError {
		t.Fatalf("last frame of type %d, not an error: %s", f.Type, f.Payload)
	}
	var x execproto.Error
	if err := json.Unmarshal(f.Payload, &x); err != nil {
		t.Fatal(err)
	}
	return x
}

func TestExecStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, OriginLocal)
	id := e.create(t, nil).ID

	t.Run("stdin", func(t *testing.T) {
		s := e.openStream(t, id, `{"args":["sh","-c","tr a-z A-Z; echo bye >&2; exit 5"],"stdin":true}`)
		s.send(t, execproto.TypeStdin, []byte("hello "))
		s.send(t, execproto.TypeStdin, []byte("world\n"))
		s.send(t, execproto.TypeStdinEOF, nil)
		out, errOut, last := s.finish(t)
		if x := exitOf(t, last); out != "HELLO WORLD\n" || errOut != "bye\n" || x.ExitCode != 5 {
			t.Errorf("stdout %q, stderr %q, exit %+v", out, errOut, x)
		}
	})
	t.Run("large output", func(t *testing.T) {
		s := e.openStream(t, id, `{"args":["head","-c","3000000","/dev/zero"]}`)
		out, _, last := s.finish(t)
		if x := exitOf(t, last); len(out) != 3000000 || x.ExitCode != 0 {
			t.Errorf("%d bytes, exit %+v", len(out), x)
		}
	})
	t.Run("signal", func(t *testing.T) {
		s := e.openStream(t, id, `{"args":["sh","-c","echo ready; exec sleep 30"]}`)
		f, err := execproto.Read(s.br, execproto.MaxPayload)
		if err != nil || string(f.Payload) != "ready\n" {
			t.Fatalf("first frame %+v, %v", f, err)
		}
		s.send(t, execproto.TypeSignal, execproto.Signal(15))
		_, _, last := s.finish(t)
		if x := exitOf(t, last); x.Signal != 15 || x.ExitCode != 143 {
			t.Errorf("exit %+v", x)
		}
	})
	t.Run("terminal and resize", func(t *testing.T) {
		s := e.openStream(t, id, `{"args":["sh","-c","stty size; read x; stty size"],"stdin":true,"tty":true,"rows":10,"cols":40}`)
		var first string
		for !strings.Contains(first, "10 40") {
			f, err := execproto.Read(s.br, execproto.MaxPayload)
			if err != nil || f.Type != execproto.TypeStdout {
				t.Fatalf("frame %d %q, %v; stdout so far %q", f.Type, f.Payload, err, first)
			}
			first += string(f.Payload)
		}
		s.send(t, execproto.TypeResize, execproto.Resize(30, 100))
		time.Sleep(100 * time.Millisecond) // let the resize land before the command reads on
		s.send(t, execproto.TypeStdin, []byte("go\n"))
		out, _, last := s.finish(t)
		out = strings.ReplaceAll(out, "\r", "")
		if x := exitOf(t, last); !strings.HasSuffix(out, "30 100\n") || x.ExitCode != 0 {
			t.Errorf("output %q, exit %+v", out, x)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		s := e.openStream(t, id, `{"args":["sleep","30"],"timeout":"100ms"}`)
		_, _, last := s.finish(t)
		if x := exitOf(t, last); !x.TimedOut || x.Signal != 9 {
			t.Errorf("exit %+v", x)
		}
	})
	t.Run("a frame only the daemon sends", func(t *testing.T) {
		s := e.openStream(t, id, `{"args":["sleep","30"]}`)
		s.send(t, execproto.TypeStdout, []byte("x"))
		_, _, last := s.finish(t)
		if x := errorOf(t, last); x.Code != CodeInvalid || !strings.Contains(x.Message, "type 3") {
			t.Errorf("error %+v", x)
		}
	})
	t.Run("stdin that was not asked for", func(t *testing.T) {
		s := e.openStream(t, id, `{"args":["sleep","30"]}`)
		s.send(t, execproto.TypeStdin, []byte("x"))
		_, _, last := s.finish(t)
		if x := errorOf(t, last); x.Code != CodeInvalid || !strings.Contains(x.Message, "stdin") {
			t.Errorf("error %+v", x)
		}
	})
	t.Run("errors before the start are HTTP errors", func(t *testing.T) {
		resp, data := e.request(t, "POST", "/v1/sandboxes/"+id+"/exec", `{"args":["no-such-command-here"]}`,
			"Connection", "Upgrade", "Upgrade", execproto.Protocol)
		want(t, resp, data, 404, CodeNotFound, "command not found")
		resp, data = e.request(t, "POST", "/v1/sandboxes/"+id+"/exec", `{"args":["cat"],"input":"x"}`,
			"Connection", "Upgrade", "Upgrade", execproto.Protocol)
		want(t, resp, data, 400, CodeInvalid, "input")
	})
}

// TestProcesses lists and signals commands started by exec, and checks
// that a client that goes away gets its command killed.
func TestProcesses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, OriginLocal)
	id := e.create(t, nil).ID
	list := func() []ProcessInfo {
		resp, data := e.request(t, "GET", "/v1/sandboxes/"+id+"/processes", nil)
		want(t, resp, data, 200, "")
		var ps []ProcessInfo
		if err := json.Unmarshal(data, &ps); err != nil {
			t.Fatal(err)
		}
		return ps
	}
	pids := func() []int {
		var out []int
		for _, p := range list() {
			out = append(out, p.PID)
		}
		return out
	}
	s := e.openStream(t, id, `{"args":["sleep","31"]}`)
	ps := list()
	if len(ps) != 1 || ps[0].PID != s.pid || !slices.Equal(ps[0].Args, []string{"sleep", "31"}) || time.Since(ps[0].Started) > time.Minute {
		t.Fatalf("processes %+v, want sleep 31 with pid %d", ps, s.pid)
	}
	path := fmt.Sprintf("/v1/sandboxes/%s/processes/%d/signal", id, s.pid)
	resp, data := e.request(t, "POST", fmt.Sprintf("/v1/sandboxes/%s/processes/%d/signal", id, s.pid+1000), `{"signal":9}`)
	want(t, resp, data, 404, CodeNotFound)
	resp, data = e.request(t, "POST", "/v1/sandboxes/nope/processes/1/signal", `{"signal":9}`)
	want(t, resp, data, 404, CodeNotFound, "nope")
	resp, data = e.request(t, "POST", path, `{"signal":9}`)
	want(t, resp, data, 204, "")
	_, _, last := s.finish(t)
	if x := exitOf(t, last); x.Signal != 9 {
		t.Errorf("exit %+v", x)
	}
	resp, data = e.request(t, "POST", path, `{"signal":9}`)
	want(t, resp, data, 404, CodeNotFound)

	// A client that hangs up ends its command.
	s = e.openStream(t, id, `{"args":["sleep","32"]}`)
	if got := pids(); !slices.Contains(got, s.pid) {
		t.Fatalf("processes %v, want %d", got, s.pid)
	}
	s.conn.Close()
	deadline := time.Now().Add(10 * time.Second)
	for slices.Contains(pids(), s.pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs after its client went away", s.pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
