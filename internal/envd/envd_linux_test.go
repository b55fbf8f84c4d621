package envd

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/approve"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// env is a handler serving one sandbox whose agent runs in the test
// process.
type env struct {
	srv   *httptest.Server
	h     *handler
	agent *agent.Client
	home  string // the home of "user"
	user  user
	// defaults are the sandbox's User and Workdir (Sandbox), set by a
	// test before its requests.
	defaults struct{ user, workdir string }
}

func newEnv(t *testing.T) *env {
	t.Helper()
	base, err := os.MkdirTemp("", "envd-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	u := user{name: "user", uid: uint32(os.Getuid()), gid: uint32(os.Getgid()), home: filepath.Join(base, "home", "user")}
	if os.Geteuid() == 0 {
		u.uid, u.gid = 1000, 1000
	}
	for _, d := range []string{filepath.Join(base, "home"), u.home, filepath.Join(base, "root")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(u.home, int(u.uid), int(u.gid)); err != nil && os.Geteuid() == 0 {
		t.Fatal(err)
	}
	users := []user{u, {name: "root", uid: uint32(os.Getuid()), gid: uint32(os.Getgid()), home: filepath.Join(base, "root")}}

	a, b := net.Pipe()
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = agent.Serve(b, agent.ServeOptions{DefaultEnv: []string{"PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8"}})
	}()
	c := agent.NewClient(a)
	t.Cleanup(func() {
		c.Close()
		<-served
	})
	e := &env{agent: c, home: u.home, user: u}
	h := newHandler(func(r *http.Request) (Sandbox, error) {
		if id := r.Header.Get("E2b-Sandbox-Id"); id != "sb1" {
			return Sandbox{}, &Error{Code: codeNotFound, Message: fmt.Sprintf("sandbox %q not found", id)}
		}
		return Sandbox{ID: "sb1", Agent: c, User: e.defaults.user, Workdir: e.defaults.workdir}, nil
	}, nil, users)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	e.srv, e.h = srv, h
	return e
}

func (e *env) request(t *testing.T, method, path, contentType string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("E2b-Sandbox-Id", "sb1")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return req
}

func do(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// call makes a unary call and decodes its answer into out (if not nil);
// it returns the HTTP status and, for an error, its Connect code.
func (e *env) call(t *testing.T, proc string, req any, out any) (int, wireError) {
	t.Helper()
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	resp, body := do(t, e.request(t, "POST", "/"+proc, "application/json", bytes.NewReader(b)))
	if resp.StatusCode != 200 {
		var we wireError
		if err := json.Unmarshal(body, &we); err != nil {
			t.Fatalf("%s: status %d, body %q", proc, resp.StatusCode, body)
		}
		return resp.StatusCode, we
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: content type %q", proc, ct)
	}
	if out != nil {
		// A fresh value: protobuf's JSON leaves out the fields that hold
		// their default.
		reflect.ValueOf(out).Elem().SetZero()
		if err := json.Unmarshal(body, out); err != nil {
			t.Fatalf("%s: decode %q: %v", proc, body, err)
		}
	}
	return 200, wireError{}
}

// mustCall makes a unary call that must succeed.
func (e *env) mustCall(t *testing.T, proc string, req any, out any) {
	t.Helper()
	if status, we := e.call(t, proc, req, out); status != 200 {
		t.Fatalf("%s: status %d: %s: %s", proc, status, we.Code, we.Message)
	}
}

// clientStream is the client's end of a server stream.
type clientStream struct {
	t    *testing.T
	resp *http.Response
	br   *bufio.Reader
}

func envelope(msg []byte) []byte {
	b := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:5], uint32(len(msg)))
	copy(b[5:], msg)
	return b
}

func (e *env) stream(t *testing.T, proc string, req any, header map[string]string) *clientStream {
	t.Helper()
	msg, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return e.rawStream(t, proc, envelope(msg), header)
}

func (e *env) rawStream(t *testing.T, proc string, body []byte, header map[string]string) *clientStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	r := e.request(t, "POST", "/"+proc, "application/connect+json", bytes.NewReader(body)).WithContext(ctx)
	for k, v := range header {
		r.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("%s: status %d, content type %q", proc, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return &clientStream{t: t, resp: resp, br: bufio.NewReader(resp.Body)}
}

// next returns the next envelope.
func (s *clientStream) next() (byte, []byte) {
	s.t.Helper()
	var hdr [5]byte
	if _, err := io.ReadFull(s.br, hdr[:]); err != nil {
		s.t.Fatalf("read envelope: %v", err)
	}
	b := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
	if _, err := io.ReadFull(s.br, b); err != nil {
		s.t.Fatalf("read envelope: %v", err)
	}
	return hdr[0], b
}

// event is a process event as a client decodes it.
type event struct {
	Start *struct {
		PID uint32 `json:"pid"`
	} `json:"start"`
	Data *struct {
		Stdout []byte `json:"stdout"`
		Stderr []byte `json:"stderr"`
		PTY    []byte `json:"pty"`
	} `json:"data"`
	End *struct {
		ExitCode int32   `json:"exitCode"`
		Exited   bool    `json:"exited"`
		Status   string  `json:"status"`
		Error    *string `json:"error"`
	} `json:"end"`
	Keepalive *struct{} `json:"keepalive"`
}

// event returns the next process event, failing at the end of the stream.
func (s *clientStream) event() event {
	s.t.Helper()
	for {
		flags, b := s.next()
		if flags&flagEndStream != 0 {
			s.t.Fatalf("end of stream instead of an event: %s", b)
		}
		var m struct {
			Event *event `json:"event"`
		}
		if err := json.Unmarshal(b, &m); err != nil || m.Event == nil {
			s.t.Fatalf("event %q: %v", b, err)
		}
		if m.Event.Keepalive == nil {
			return *m.Event
		}
	}
}

// endOfStream reads the end-of-stream envelope and returns its error.
func (s *clientStream) endOfStream() *wireError {
	s.t.Helper()
	flags, b := s.next()
	if flags != flagEndStream {
		s.t.Fatalf("envelope %q with flags %#x instead of the end of the stream", b, flags)
	}
	var m struct {
		Error *wireError `json:"error"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		s.t.Fatalf("end of stream %q: %v", b, err)
	}
	return m.Error
}

// collect reads events to the end of the command and returns its output.
func (s *clientStream) collect() (stdout, stderr string, end event) {
	s.t.Helper()
	var out, errb bytes.Buffer
	for {
		ev := s.event()
		switch {
		case ev.Data != nil:
			out.Write(ev.Data.Stdout)
			out.Write(ev.Data.PTY)
			errb.Write(ev.Data.Stderr)
		case ev.End != nil:
			if e := s.endOfStream(); e != nil {
				s.t.Fatalf("stream ended with %+v", e)
			}
			return out.String(), errb.String(), ev
		default:
			s.t.Fatalf("unexpected event %+v", ev)
		}
	}
}

func bashStart(cmd string) map[string]any {
	return map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-c", cmd}}, "stdin": false}
}

func TestStart(t *testing.T) {
	e := newEnv(t)
	s := e.stream(t, "process.Process/Start", map[string]any{
		"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-c", "echo out; echo err >&2; echo $HOME $USER; pwd; id -u; exit 3"}, "envs": map[string]string{"X": "y"}},
		"stdin":   false,
	}, map[string]string{"Keepalive-Ping-Interval": "50"})
	first := s.event()
	if first.Start == nil || first.Start.PID == 0 {
		t.Fatalf("first event %+v, want a start with a pid", first)
	}
	stdout, stderr, end := s.collect()
	want := fmt.Sprintf("out\n%s user\n%s\n%d\n", e.home, e.home, e.user.uid)
	if stdout != want || stderr != "err\n" {
		t.Errorf("stdout %q, stderr %q; want %q, %q", stdout, stderr, want, "err\n")
	}
	if end.End.ExitCode != 3 || !end.End.Exited || end.End.Status != "exit status 3" || end.End.Error == nil || *end.End.Error != "exit status 3" {
		t.Errorf("end %+v", *end.End)
	}

	s = e.stream(t, "process.Process/Start", bashStart("true"), nil)
	s.event()
	if _, _, end := s.collect(); end.End.ExitCode != 0 || end.End.Status != "exit status 0" || end.End.Error != nil {
		t.Errorf("end %+v", *end.End)
	}

	// A command that cannot start ends the stream with an error.
	s = e.stream(t, "process.Process/Start", map[string]any{"process": map[string]any{"cmd": "/nonexistent"}}, nil)
	if we := s.endOfStream(); we == nil || we.Code != codeNotFound {
		t.Errorf("start of a missing command: %+v", we)
	}
	// So does an unknown user.
	s = e.stream(t, "process.Process/Start", bashStart("true"), map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("no-such-user:"))})
	if we := s.endOfStream(); we == nil || we.Code != codeInvalidArgument || !strings.Contains(we.Message, "no-such-user") {
		t.Errorf("start as no-such-user: %+v", we)
	}
}

func TestBackgroundProcess(t *testing.T) {
	e := newEnv(t)
	s := e.stream(t, "process.Process/Start", map[string]any{
		"process": map[string]any{"cmd": "cat"},
		"tag":     "t1",
		"stdin":   true,
	}, nil)
	start := s.event()
	pid := start.Start.PID

	var list struct {
		Processes []struct {
			Config processConfig `json:"config"`
			PID    uint32        `json:"pid"`
			Tag    *string       `json:"tag"`
		} `json:"processes"`
	}
	e.mustCall(t, "process.Process/List", map[string]any{}, &list)
	if len(list.Processes) != 1 || list.Processes[0].PID != pid || list.Processes[0].Tag == nil || *list.Processes[0].Tag != "t1" ||
		list.Processes[0].Config.Cmd != "cat" || list.Processes[0].Config.Cwd == nil || *list.Processes[0].Config.Cwd != e.home {
		t.Fatalf("list: %+v", list)
	}

	// A second stream connects by tag and sees the output from now on.
	c := e.stream(t, "process.Process/Connect", map[string]any{"process": map[string]any{"tag": "t1"}}, nil)
	if ev := c.event(); ev.Start == nil || ev.Start.PID != pid {
		t.Fatalf("connect: first event %+v", ev)
	}
	e.mustCall(t, "process.Process/SendInput", map[string]any{
		"process": map[string]any{"pid": pid},
		"input":   map[string]any{"stdin": base64.StdEncoding.EncodeToString([]byte("hello\n"))},
	}, nil)
	for _, st := range []*clientStream{s, c} {
		var got []byte
		for len(got) < 6 {
			ev := st.event()
			if ev.Data == nil {
				t.Fatalf("event %+v, want data", ev)
			}
			got = append(got, ev.Data.Stdout...)
		}
		if string(got) != "hello\n" {
			t.Errorf("stdout %q", got)
		}
	}

	e.mustCall(t, "process.Process/SendSignal", map[string]any{"process": map[string]any{"pid": pid}, "signal": "SIGNAL_SIGKILL"}, nil)
	for _, st := range []*clientStream{s, c} {
		_, _, end := st.collect()
		if end.End.ExitCode != -1 || end.End.Exited || end.End.Status != "signal: killed" || end.End.Error == nil || *end.End.Error != "signal: killed" {
			t.Errorf("end %+v", *end.End)
		}
	}
	e.mustCall(t, "process.Process/List", map[string]any{}, &list)
	if len(list.Processes) != 0 {
		t.Errorf("list after the end: %+v", list)
	}
	if status, we := e.call(t, "process.Process/SendSignal", map[string]any{"process": map[string]any{"pid": pid}, "signal": 15}, nil); status != 404 || we.Code != codeNotFound {
		t.Errorf("signal to an ended process: %d %+v", status, we)
	}
	c = e.stream(t, "process.Process/Connect", map[string]any{"process": map[string]any{"pid": pid}}, nil)
	if we := c.endOfStream(); we == nil || we.Code != codeNotFound {
		t.Errorf("connect to an ended process: %+v", we)
	}
}

// TestStartTimeout: Connect-Timeout-Ms bounds the command, which is killed
// when it passes, whether or not a stream still follows it.
func TestStartTimeout(t *testing.T) {
	e := newEnv(t)
	// The stream that started it is gone before the deadline.
	s := e.stream(t, "process.Process/Start", bashStart("sleep 30"), map[string]string{"Connect-Timeout-Ms": "300"})
	pid := s.event().Start.PID
	s.resp.Body.Close()
	c := e.stream(t, "process.Process/Connect", map[string]any{"process": map[string]any{"pid": pid}}, nil)
	if ev := c.event(); ev.Start == nil || ev.Start.PID != pid {
		t.Fatalf("connect: first event %+v", ev)
	}
	start := time.Now()
	_, _, end := c.collect()
	if end.End.ExitCode != -1 || end.End.Exited || end.End.Status != "signal: killed" || end.End.Error == nil || !strings.Contains(*end.End.Error, "timed out") {
		t.Errorf("end %+v", *end.End)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the command ended after %v, want at its deadline", d)
	}
	var list struct {
		Processes []json.RawMessage `json:"processes"`
	}
	e.mustCall(t, "process.Process/List", map[string]any{}, &list)
	if len(list.Processes) != 0 {
		t.Errorf("list after the deadline: %s", list.Processes)
	}
}

func TestCloseStdin(t *testing.T) {
	e := newEnv(t)
	s := e.stream(t, "process.Process/Start", map[string]any{"process": map[string]any{"cmd": "wc", "args": []string{"-c"}}, "stdin": true}, nil)
	pid := s.event().Start.PID
	e.mustCall(t, "process.Process/SendInput", map[string]any{
		"process": map[string]any{"pid": pid},
		"input":   map[string]any{"stdin": base64.StdEncoding.EncodeToString([]byte("12345"))},
	}, nil)
	e.mustCall(t, "process.Process/CloseStdin", map[string]any{"process": map[string]any{"pid": pid}}, nil)
	if stdout, _, end := s.collect(); strings.TrimSpace(stdout) != "5" || end.End.ExitCode != 0 {
		t.Errorf("wc -c: %q, %+v", stdout, *end.End)
	}
}

func TestPTY(t *testing.T) {
	e := newEnv(t)
	s := e.stream(t, "process.Process/Start", map[string]any{
		"process": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", "read x; stty size; echo got $x"}},
		"pty":     map[string]any{"size": map[string]any{"cols": 100, "rows": 30}},
	}, nil)
	pid := s.event().Start.PID
	e.mustCall(t, "process.Process/Update", map[string]any{"process": map[string]any{"pid": pid}, "pty": map[string]any{"size": map[string]any{"cols": 120, "rows": 40}}}, nil)
	e.mustCall(t, "process.Process/SendInput", map[string]any{
		"process": map[string]any{"pid": pid},
		"input":   map[string]any{"pty": base64.StdEncoding.EncodeToString([]byte("abc\n"))},
	}, nil)
	out, _, end := s.collect()
	if !strings.Contains(out, "40 120") || !strings.Contains(out, "got abc") || end.End.ExitCode != 0 {
		t.Errorf("pty output %q, end %+v", out, *end.End)
	}
}

func TestFiles(t *testing.T) {
	e := newEnv(t)
	data := make([]byte, 300<<10)
	rand.Read(data)

	// Multipart, the path relative to the user's home, parents made.
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormFile("file", "dir/sub/f.bin")
	fw.Write(data)
	fw, _ = mw.CreateFormFile("file", "/tmp/../"+strings.TrimPrefix(e.home, "/")+"/g.txt")
	fw.Write([]byte("second"))
	// A quote escaped as a form (and the Python SDK's httpx) escapes it;
	// another percent sign stays.
	fw, _ = mw.CreatePart(textproto.MIMEHeader{"Content-Disposition": {`form-data; name="file"; filename="q%22uote%25.txt"`}})
	fw.Write([]byte("third"))
	mw.Close()
	resp, b := do(t, e.request(t, "POST", "/files?username=user", mw.FormDataContentType(), &body))
	if resp.StatusCode != 200 {
		t.Fatalf("upload: %d %s", resp.StatusCode, b)
	}
	var up []uploaded
	if err := json.Unmarshal(b, &up); err != nil {
		t.Fatal(err)
	}
	want := []uploaded{{Path: e.home + "/dir/sub/f.bin", Name: "f.bin", Type: "file"}, {Path: e.home + "/g.txt", Name: "g.txt", Type: "file"},
		{Path: e.home + `/q"uote%25.txt`, Name: `q"uote%25.txt`, Type: "file"}}
	if fmt.Sprint(up) != fmt.Sprint(want) {
		t.Errorf("upload: %+v, want %+v", up, want)
	}
	for _, p := range []string{e.home + "/dir", e.home + "/dir/sub", e.home + "/dir/sub/f.bin"} {
		fi, err := e.agent.Stat(context.Background(), p)
		if err != nil || fi.UID != e.user.uid || fi.GID != e.user.gid {
			t.Errorf("%s: %+v, %v; want owned by %d:%d", p, fi, err, e.user.uid, e.user.gid)
		}
	}

	resp, b = do(t, e.request(t, "GET", "/files?path=dir/sub/f.bin&username=user", "", nil))
	if resp.StatusCode != 200 || !bytes.Equal(b, data) {
		t.Errorf("download: %d, %d bytes", resp.StatusCode, len(b))
	}

	// A raw, gzipped body; the user from the query.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(data[:1000])
	zw.Close()
	req := e.request(t, "POST", "/files?path="+e.home+"/raw.bin", "application/octet-stream", &gz)
	req.Header.Set("Content-Encoding", "gzip")
	if resp, b := do(t, req); resp.StatusCode != 200 {
		t.Fatalf("raw upload: %d %s", resp.StatusCode, b)
	}
	if got, err := os.ReadFile(e.home + "/raw.bin"); err != nil || !bytes.Equal(got, data[:1000]) {
		t.Errorf("raw upload wrote %d bytes, %v", len(got), err)
	}

	resp, b = do(t, e.request(t, "GET", "/files?path=missing&username=user", "", nil))
	var fe struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if resp.StatusCode != 404 || json.Unmarshal(b, &fe) != nil || fe.Code != 404 || fe.Message == "" {
		t.Errorf("download of a missing file: %d %s", resp.StatusCode, b)
	}
	if resp, b := do(t, e.request(t, "GET", "/files?path=x&username=no-such-user", "", nil)); resp.StatusCode != 400 || !strings.Contains(string(b), "no-such-user") {
		t.Errorf("download as no-such-user: %d %s", resp.StatusCode, b)
	}
	if resp, b := do(t, e.request(t, "POST", "/files?username=user", "text/plain", strings.NewReader("x"))); resp.StatusCode != 400 {
		t.Errorf("upload of text/plain: %d %s", resp.StatusCode, b)
	}
}

// The messages of envd's protocol in JSON, as a client that speaks it
// with raw HTTP decodes them.
type (
	wireError struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	processConfig struct {
		Cmd  string            `json:"cmd"`
		Args []string          `json:"args"`
		Envs map[string]string `json:"envs"`
		Cwd  *string           `json:"cwd"`
	}
	entryInfo struct {
		Name          string            `json:"name"`
		Type          string            `json:"type"`
		Path          string            `json:"path"`
		Size          string            `json:"size"`
		Mode          uint32            `json:"mode"`
		Permissions   string            `json:"permissions"`
		Owner         string            `json:"owner"`
		Group         string            `json:"group"`
		ModifiedTime  string            `json:"modifiedTime"`
		SymlinkTarget *string           `json:"symlinkTarget"`
		Metadata      map[string]string `json:"metadata"`
	}
	entryResp struct {
		Entry entryInfo `json:"entry"`
	}
	filesystemEvent struct {
		Name  string     `json:"name"`
		Type  string     `json:"type"`
		Entry *entryInfo `json:"entry"`
	}
	watchResponse struct {
		Start      *struct{}        `json:"start"`
		Filesystem *filesystemEvent `json:"filesystem"`
		Keepalive  *struct{}        `json:"keepalive"`
	}
)

// typ is the entry's type, FILE_TYPE_UNSPECIFIED (the default, which
// protobuf's JSON leaves out) if none.
func (e entryInfo) typ() string {
	if e.Type == "" {
		return "FILE_TYPE_UNSPECIFIED"
	}
	return e.Type
}

// flagEndStream marks the last envelope of a Connect stream.
const flagEndStream = 0x02

func TestFilesystem(t *testing.T) {
	e := newEnv(t)
	var st entryResp
	if status, we := e.call(t, "filesystem.Filesystem/Stat", map[string]any{"path": "missing"}, nil); status != 404 || we.Code != codeNotFound {
		t.Errorf("stat of a missing path: %d %+v", status, we)
	}
	e.mustCall(t, "filesystem.Filesystem/MakeDir", map[string]any{"path": "a/b"}, &st)
	if st.Entry.Path != e.home+"/a/b" || st.Entry.Type != "FILE_TYPE_DIRECTORY" || st.Entry.Owner != "user" || st.Entry.Name != "b" {
		t.Errorf("make dir: %+v", st.Entry)
	}
	if status, we := e.call(t, "filesystem.Filesystem/MakeDir", map[string]any{"path": "a/b"}, nil); status != 409 || we.Code != codeAlreadyExists {
		t.Errorf("make an existing dir: %d %+v", status, we)
	}
	if err := os.WriteFile(e.home+"/a/b/f", []byte("12345"), 0o640); err != nil {
		t.Fatal(err)
	}
	// Links as envd describes them: the absolute path they resolve to,
	// every link on the way followed, with its type and mode.
	for _, l := range [][2]string{
		{"f", "l"}, {"l", "l2"}, {"../b", "dl"}, {e.home + "/a/b/dl/f", "abs"}, {"missing", "dangling"}, {"loop", "loop"},
	} {
		if err := os.Symlink(l[0], e.home+"/a/b/"+l[1]); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ name, target, typ string }{
		{"l", e.home + "/a/b/f", "FILE_TYPE_FILE"}, {"l2", e.home + "/a/b/f", "FILE_TYPE_FILE"},
		{"dl", e.home + "/a/b", "FILE_TYPE_DIRECTORY"}, {"abs", e.home + "/a/b/f", "FILE_TYPE_FILE"},
		{"dangling", e.home + "/a/b/dangling", "FILE_TYPE_UNSPECIFIED"}, {"loop", e.home + "/a/b/loop", "FILE_TYPE_UNSPECIFIED"},
	} {
		e.mustCall(t, "filesystem.Filesystem/Stat", map[string]any{"path": "a/b/" + c.name}, &st)
		if st.Entry.SymlinkTarget == nil || *st.Entry.SymlinkTarget != c.target || st.Entry.typ() != c.typ ||
			st.Entry.Path != e.home+"/a/b/"+c.name || !strings.HasPrefix(st.Entry.Permissions, "L") {
			t.Errorf("stat of link %s: %+v, want target %s of type %s", c.name, st.Entry, c.target, c.typ)
		}
	}
	if st.Entry.Mode != 0 {
		t.Errorf("a link that resolves to nothing has mode %o", st.Entry.Mode)
	}
	e.mustCall(t, "filesystem.Filesystem/Stat", map[string]any{"path": "a/b/l"}, &st)
	if st.Entry.Mode != 0o640 {
		t.Errorf("a link to a file of mode 640 has mode %o", st.Entry.Mode)
	}
	e.mustCall(t, "filesystem.Filesystem/Stat", map[string]any{"path": e.home + "/a/b/f"}, &st)
	if st.Entry.Size != "5" || st.Entry.Mode != 0o640 || st.Entry.Permissions != "-rw-r-----" || st.Entry.Type != "FILE_TYPE_FILE" {
		t.Errorf("stat: %+v", st.Entry)
	}
	if _, err := time.Parse(time.RFC3339Nano, st.Entry.ModifiedTime); err != nil || !strings.HasSuffix(st.Entry.ModifiedTime, "Z") {
		t.Errorf("modified time %q: %v", st.Entry.ModifiedTime, err)
	}

	var ls struct {
		Entries []entryInfo `json:"entries"`
	}
	e.mustCall(t, "filesystem.Filesystem/ListDir", map[string]any{"path": "a", "depth": 1}, &ls)
	if len(ls.Entries) != 1 || ls.Entries[0].Path != e.home+"/a/b" {
		t.Errorf("list depth 1: %+v", ls.Entries)
	}
	e.mustCall(t, "filesystem.Filesystem/ListDir", map[string]any{"path": "a", "depth": 2}, &ls)
	var got []string
	for _, en := range ls.Entries {
		got = append(got, en.Name+":"+en.typ())
		if en.Name == "l" && (en.SymlinkTarget == nil || *en.SymlinkTarget != e.home+"/a/b/f") {
			t.Errorf("symlink entry: %+v", en)
		}
		if en.Name == "f" && en.SymlinkTarget != nil {
			t.Errorf("a file with a symlink target: %+v", en)
		}
	}
	if strings.Join(got, " ") != "b:FILE_TYPE_DIRECTORY abs:FILE_TYPE_FILE dangling:FILE_TYPE_UNSPECIFIED dl:FILE_TYPE_DIRECTORY f:FILE_TYPE_FILE l:FILE_TYPE_FILE l2:FILE_TYPE_FILE loop:FILE_TYPE_UNSPECIFIED" {
		t.Errorf("list depth 2: %v", got)
	}

	e.mustCall(t, "filesystem.Filesystem/Move", map[string]any{"source": "a/b/f", "destination": "c/g"}, &st)
	if st.Entry.Path != e.home+"/c/g" || st.Entry.Size != "5" {
		t.Errorf("move: %+v", st.Entry)
	}
	e.mustCall(t, "filesystem.Filesystem/Remove", map[string]any{"path": "a"}, nil)
	if _, err := os.Lstat(e.home + "/a"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after remove: %v", err)
	}
	// As envd's: removing what is not there succeeds.
	e.mustCall(t, "filesystem.Filesystem/Remove", map[string]any{"path": "a"}, nil)
	e.mustCall(t, "filesystem.Filesystem/Remove", map[string]any{"path": "a/b/c"}, nil)
}

// fsEvent returns the next filesystem event of a watch, failing at the
// end of the stream.
func (s *clientStream) fsEvent() filesystemEvent {
	s.t.Helper()
	for {
		flags, b := s.next()
		if flags != 0 {
			s.t.Fatalf("end of stream: %s", b)
		}
		var m watchResponse
		if err := json.Unmarshal(b, &m); err != nil {
			s.t.Fatal(err)
		}
		if m.Filesystem != nil {
			return *m.Filesystem
		}
	}
}

// waitEvent reads events until one named name of type typ.
func (s *clientStream) waitEvent(name, typ string) filesystemEvent {
	s.t.Helper()
	for {
		ev := s.fsEvent()
		if strings.Contains(ev.Name, ".hutch-write-") {
			s.t.Errorf("event of a temporary file: %+v", ev)
		}
		if ev.Name == name && ev.Type == typ {
			return ev
		}
	}
}

// inotifyInstances counts the inotify instances of the test process.
func inotifyInstances(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); l == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

func TestWatch(t *testing.T) {
	e := newEnv(t)
	base := inotifyInstances(t)
	s := e.stream(t, "filesystem.Filesystem/WatchDir", map[string]any{"path": e.home, "includeEntry": true, "recursive": true}, nil)
	if _, b := s.next(); !isWatchStart(b) {
		t.Fatalf("first message %s", b)
	}
	if _, err := e.agent.WriteFile(context.Background(), e.home+"/new.txt", strings.NewReader("x"), 0); err != nil {
		t.Fatal(err)
	}
	ev := s.waitEvent("new.txt", "EVENT_TYPE_CREATE")
	if ev.Entry == nil || ev.Entry.Path != e.home+"/new.txt" || ev.Entry.Size != "1" {
		t.Errorf("event %+v", ev)
	}
	f, err := os.OpenFile(e.home+"/new.txt", os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("more")
	f.Close()
	s.waitEvent("new.txt", "EVENT_TYPE_WRITE")
	if err := os.Chmod(e.home+"/new.txt", 0o600); err != nil {
		t.Fatal(err)
	}
	s.waitEvent("new.txt", "EVENT_TYPE_CHMOD")
	if err := os.Rename(e.home+"/new.txt", e.home+"/moved.txt"); err != nil {
		t.Fatal(err)
	}
	if ev := s.waitEvent("new.txt", "EVENT_TYPE_RENAME"); ev.Entry != nil {
		t.Errorf("rename with an entry: %+v", ev)
	}
	s.waitEvent("moved.txt", "EVENT_TYPE_CREATE")
	if err := os.MkdirAll(e.home+"/sub/deeper", 0o755); err != nil {
		t.Fatal(err)
	}
	if ev := s.waitEvent("sub", "EVENT_TYPE_CREATE"); ev.Entry == nil || ev.Entry.Type != "FILE_TYPE_DIRECTORY" {
		t.Errorf("event %+v", ev)
	}
	s.waitEvent("sub/deeper", "EVENT_TYPE_CREATE")
	if err := os.WriteFile(e.home+"/sub/deeper/f", []byte("f"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.waitEvent("sub/deeper/f", "EVENT_TYPE_CREATE")
	if err := os.Remove(e.home + "/sub/deeper/f"); err != nil {
		t.Fatal(err)
	}
	s.waitEvent("sub/deeper/f", "EVENT_TYPE_REMOVE")
	// A directory made through envd (which sets its owner: an event of the
	// new, watched directory itself) is reported by its name, and the
	// watch goes on.
	e.mustCall(t, "filesystem.Filesystem/MakeDir", map[string]any{"path": "made"}, nil)
	s.waitEvent("made", "EVENT_TYPE_CREATE")
	if err := os.Chmod(e.home+"/made", 0o700); err != nil {
		t.Fatal(err)
	}
	s.waitEvent("made", "EVENT_TYPE_CHMOD")
	if err := os.WriteFile(e.home+"/made/in", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s.waitEvent("made/in", "EVENT_TYPE_CREATE")
	if err := e.agent.Err(); err != nil {
		t.Fatalf("the agent connection ended: %v", err)
	}
	// Closing the stream stops the agent's watch.
	s.resp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for inotifyInstances(t) > base {
		if time.Now().After(deadline) {
			t.Fatalf("%d inotify instances after the stream closed, %d before", inotifyInstances(t), base)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// A watch of a directory that goes away ends.
	if err := os.Mkdir(e.home+"/gone", 0o755); err != nil {
		t.Fatal(err)
	}
	s = e.stream(t, "filesystem.Filesystem/WatchDir", map[string]any{"path": "gone"}, nil)
	if _, b := s.next(); !isWatchStart(b) {
		t.Fatalf("first message %s", b)
	}
	if err := os.Remove(e.home + "/gone"); err != nil {
		t.Fatal(err)
	}
	if we := s.endOfStream(); we == nil || we.Code != codeNotFound {
		t.Errorf("watch of a removed dir: %+v", we)
	}

	var cw struct {
		WatcherID string `json:"watcherId"`
	}
	e.mustCall(t, "filesystem.Filesystem/CreateWatcher", map[string]any{"path": e.home}, &cw)
	if err := os.Remove(e.home + "/moved.txt"); err != nil {
		t.Fatal(err)
	}
	var evs struct {
		Events []filesystemEvent `json:"events"`
	}
	for deadline := time.Now().Add(5 * time.Second); len(evs.Events) == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		e.mustCall(t, "filesystem.Filesystem/GetWatcherEvents", map[string]any{"watcherId": cw.WatcherID}, &evs)
	}
	if len(evs.Events) != 1 || evs.Events[0].Name != "moved.txt" || evs.Events[0].Type != "EVENT_TYPE_REMOVE" {
		t.Errorf("watcher events: %+v", evs)
	}
	e.mustCall(t, "filesystem.Filesystem/GetWatcherEvents", map[string]any{"watcherId": cw.WatcherID}, &evs)
	if len(evs.Events) != 0 {
		t.Errorf("watcher events read twice: %+v", evs)
	}
	e.mustCall(t, "filesystem.Filesystem/RemoveWatcher", map[string]any{"watcherId": cw.WatcherID}, nil)
	if status, _ := e.call(t, "filesystem.Filesystem/GetWatcherEvents", map[string]any{"watcherId": cw.WatcherID}, nil); status != 404 {
		t.Errorf("events of a removed watcher: %d", status)
	}
	s = e.stream(t, "filesystem.Filesystem/WatchDir", map[string]any{"path": "missing"}, nil)
	if we := s.endOfStream(); we == nil || we.Code != codeNotFound {
		t.Errorf("watch of a missing dir: %+v", we)
	}
	deadline = time.Now().Add(5 * time.Second)
	for inotifyInstances(t) > base {
		if time.Now().After(deadline) {
			t.Fatalf("%d inotify instances after the watches ended, %d before", inotifyInstances(t), base)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWatcherBounds checks that a watcher whose events are not read stops
// with resource_exhausted once it would keep too many, after returning
// those it kept.
func TestWatcherBounds(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 10,000 files")
	}
	e := newEnv(t)
	var cw struct {
		WatcherID string `json:"watcherId"`
	}
	e.mustCall(t, "filesystem.Filesystem/CreateWatcher", map[string]any{"path": e.home}, &cw)
	for i := range maxWatcherEvents + 100 {
		f, err := os.Create(fmt.Sprintf("%s/%d", e.home, i))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	// Unread, the watcher keeps events until it would keep too many, then
	// stops: wait for that (on a busy machine the agent's events may
	// trickle in), so that no read drains it before.
	stopped := testutil.Eventually(2*time.Minute, func() bool {
		e.h.mu.Lock()
		defer e.h.mu.Unlock()
		for _, b := range e.h.boxes {
			b.mu.Lock()
			wt := b.watchers[cw.WatcherID]
			b.mu.Unlock()
			if wt != nil {
				wt.mu.Lock()
				defer wt.mu.Unlock()
				return wt.err != nil
			}
		}
		return false
	})
	if !stopped {
		t.Fatal("the unread watcher did not stop")
	}
	got := 0
	deadline := time.Now().Add(20 * time.Second)
	for {
		var evs struct {
			Events []filesystemEvent `json:"events"`
		}
		status, we := e.call(t, "filesystem.Filesystem/GetWatcherEvents", map[string]any{"watcherId": cw.WatcherID}, &evs)
		if status != 200 {
			if we.Code != codeResourceExhausted {
				t.Fatalf("events: %d %+v", status, we)
			}
			break
		}
		got += len(evs.Events)
		if time.Now().After(deadline) {
			t.Fatalf("%d events and no error", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got == 0 || got > maxWatcherEvents {
		t.Errorf("%d events", got)
	}
}

func TestProtocolErrors(t *testing.T) {
	e := newEnv(t)
	check := func(name string, req *http.Request, status int, code string) {
		t.Helper()
		resp, b := do(t, req)
		var we wireError
		if resp.StatusCode != status || json.Unmarshal(b, &we) != nil || we.Code != code {
			t.Errorf("%s: %d %s; want %d %s", name, resp.StatusCode, b, status, code)
		}
	}
	check("malformed JSON", e.request(t, "POST", "/filesystem.Filesystem/Stat", "application/json", strings.NewReader("{")), 400, codeInvalidArgument)
	check("wrong field type", e.request(t, "POST", "/filesystem.Filesystem/Stat", "application/json", strings.NewReader(`{"path":7}`)), 400, codeInvalidArgument)
	check("oversized", e.request(t, "POST", "/filesystem.Filesystem/Stat", "application/json", bytes.NewReader(make([]byte, maxMessage+1))), 429, codeResourceExhausted)
	// An empty body is the empty message: here, a Stat of no path.
	check("empty body", e.request(t, "POST", "/filesystem.Filesystem/Stat", "application/json", nil), 400, codeInvalidArgument)
	if resp, b := do(t, e.request(t, "POST", "/filesystem.Filesystem/Stat", "application/xml", strings.NewReader("<path/>"))); resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("unknown codec: %d %s", resp.StatusCode, b)
	}
	check("unknown procedure", e.request(t, "POST", "/process.Process/Nope", "application/json", strings.NewReader("{}")), 501, codeUnimplemented)
	req := e.request(t, "POST", "/process.Process/List", "application/json", strings.NewReader("{}"))
	req.Header.Set("E2b-Sandbox-Id", "other")
	check("unknown sandbox", req, 404, codeNotFound)
	req = e.request(t, "POST", "/process.Process/List", "application/json", strings.NewReader("{}"))
	req.Header.Set("Connect-Timeout-Ms", "soon")
	check("bad timeout", req, 400, codeInvalidArgument)
	req = e.request(t, "POST", "/filesystem.Filesystem/Stat", "application/json", strings.NewReader(`{"path":"x"}`))
	req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("no-such-user:")))
	check("unknown user", req, 400, codeInvalidArgument)
	check("invalid signal", e.request(t, "POST", "/process.Process/SendSignal", "application/json", strings.NewReader(`{"process":{"pid":1},"signal":"SIGNAL_SIGHUP"}`)), 400, codeInvalidArgument)

	// Malformed envelopes end the stream with connect-go's codes.
	msg, _ := json.Marshal(bashStart("true"))
	for name, c := range map[string]struct {
		body []byte
		code string
	}{
		"two messages":        {append(envelope(msg), envelope(msg)...), codeUnimplemented},
		"truncated envelope":  {envelope(msg)[:8], codeInternal},
		"oversized envelope":  {[]byte{0, 0xff, 0xff, 0xff, 0xff}, codeResourceExhausted},
		"unknown flags":       {append([]byte{0x80}, envelope(msg)[1:]...), codeInternal},
		"malformed JSON body": {envelope([]byte("{")), codeInvalidArgument},
	} {
		s := e.rawStream(t, "process.Process/Start", c.body, nil)
		if we := s.endOfStream(); we == nil || we.Code != c.code {
			t.Errorf("%s: %+v, want %s", name, we, c.code)
		}
	}

	resp, _ := do(t, e.request(t, "GET", "/health", "", nil))
	if resp.StatusCode != 204 {
		t.Errorf("health: %d", resp.StatusCode)
	}
	// E2B's API's health check names no sandbox and needs no key; one
	// naming a sandbox that does not exist is that sandbox's error.
	api, _ := http.NewRequest("GET", e.srv.URL+"/health", nil)
	if resp, _ := do(t, api); resp.StatusCode != 204 {
		t.Errorf("the API's health: %d", resp.StatusCode)
	}
	unknown := e.request(t, "GET", "/health", "", nil)
	unknown.Header.Set("E2b-Sandbox-Id", "sb-unknown")
	if resp, _ := do(t, unknown); resp.StatusCode/100 == 2 {
		t.Errorf("health of an unknown sandbox: %d", resp.StatusCode)
	}
	for p, want := range map[string]bool{"/process.Process/Start": true, "/filesystem.Filesystem/Stat": true, "/files": true, "/health": true, "/sandboxes": false, "/filesx": false} {
		if Paths(p) != want {
			t.Errorf("Paths(%q) = %v", p, !want)
		}
	}
}

// TestSandboxEndsUnderStreams: when the sandbox's agent connection ends
// (the sandbox was killed) under a command's stream and a watch's, both
// responses are cut off without an end, as envd's are when its sandbox
// goes: E2B's SDKs then ask /health and report the sandbox killed, not
// the command's exit.
func TestSandboxEndsUnderStreams(t *testing.T) {
	e := newEnv(t)
	cmd := e.stream(t, "process.Process/Start", map[string]any{"process": map[string]any{"cmd": "/bin/sleep", "args": []string{"60"}}}, nil)
	if _, b := cmd.next(); !strings.Contains(string(b), `"start"`) {
		t.Fatalf("first message %s", b)
	}
	watch := e.stream(t, "filesystem.Filesystem/WatchDir", map[string]any{"path": e.home}, nil)
	if _, b := watch.next(); !isWatchStart(b) {
		t.Fatalf("first message %s", b)
	}
	e.agent.Close()
	for name, s := range map[string]*clientStream{"command": cmd, "watch": watch} {
		rest, err := io.ReadAll(s.br)
		if err == nil {
			t.Errorf("%s: the stream ended cleanly after the sandbox ended: %q", name, rest)
		}
		for len(rest) >= 5 {
			if rest[0]&flagEndStream != 0 {
				t.Errorf("%s: an end of stream after the sandbox ended: %q", name, rest[5:])
			}
			rest = rest[min(len(rest), 5+int(binary.BigEndian.Uint32(rest[1:5]))):]
		}
	}
}

// TestFilesMetadata checks file metadata: X-Metadata-* headers of an upload
// (multipart and raw) stored as user.e2b.* extended attributes, returned by
// the upload, Stat, ListDir, Move and watch events; replaced by the next
// upload; set in the sandbox directly; refused when malformed, before any
// file is written.
func TestFilesMetadata(t *testing.T) {
	e := newEnv(t)
	upload := func(p, content string, meta map[string]string, raw bool) (int, []uploaded, string) {
		t.Helper()
		var req *http.Request
		if raw {
			req = e.request(t, "POST", "/files?username=user&path="+p, "application/octet-stream", strings.NewReader(content))
		} else {
			var body bytes.Buffer
			mw := multipart.NewWriter(&body)
			fw, _ := mw.CreateFormFile("file", p)
			fw.Write([]byte(content))
			mw.Close()
			req = e.request(t, "POST", "/files?username=user", mw.FormDataContentType(), &body)
		}
		for k, v := range meta {
			req.Header[k] = append(req.Header[k], v)
		}
		resp, b := do(t, req)
		var up []uploaded
		if resp.StatusCode == 200 {
			if err := json.Unmarshal(b, &up); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode, up, string(b)
	}
	stat := func(p string) map[string]string {
		t.Helper()
		var st entryResp
		e.mustCall(t, "filesystem.Filesystem/Stat", map[string]any{"path": p}, &st)
		return st.Entry.Metadata
	}
	meta := map[string]string{"author": "mish", "purpose": "upload"}
	for _, raw := range []bool{false, true} {
		p := fmt.Sprintf("meta-%v.txt", raw)
		status, up, body := upload(p, "content", map[string]string{"X-Metadata-Author": "mish", "x-metadata-purpose": "upload"}, raw)
		if status != 200 || len(up) != 1 || fmt.Sprint(up[0].Metadata) != fmt.Sprint(meta) {
			t.Fatalf("upload (raw %v): %d %s", raw, status, body)
		}
		if got := stat(p); fmt.Sprint(got) != fmt.Sprint(meta) {
			t.Errorf("stat after the upload (raw %v): %v", raw, got)
		}
	}
	var list struct {
		Entries []entryInfo `json:"entries"`
	}
	e.mustCall(t, "filesystem.Filesystem/ListDir", map[string]any{"path": "~"}, &list)
	found := 0
	for _, en := range list.Entries {
		if strings.HasPrefix(en.Name, "meta-") && fmt.Sprint(en.Metadata) == fmt.Sprint(meta) {
			found++
		}
	}
	if found != 2 {
		t.Errorf("list: %+v", list.Entries)
	}
	var moved entryResp
	e.mustCall(t, "filesystem.Filesystem/Move", map[string]any{"source": "meta-false.txt", "destination": "renamed.txt"}, &moved)
	if fmt.Sprint(moved.Entry.Metadata) != fmt.Sprint(meta) {
		t.Errorf("move: %+v", moved.Entry)
	}

	// An upload without metadata clears the file's; the file keeps its
	// inode (written in place).
	ino := func(p string) uint64 {
		t.Helper()
		fi, err := os.Stat(filepath.Join(e.home, p))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	before := ino("renamed.txt")
	if status, up, body := upload("renamed.txt", "second", nil, false); status != 200 || up[0].Metadata != nil {
		t.Fatalf("upload without metadata: %d %s", status, body)
	}
	if got := stat("renamed.txt"); got != nil || ino("renamed.txt") != before {
		t.Errorf("after an upload without metadata: %v, inode %d (was %d)", got, ino("renamed.txt"), before)
	}

	// Metadata set in the sandbox directly.
	if err := syscall.Setxattr(filepath.Join(e.home, "renamed.txt"), "user.e2b.author", []byte("set"), 0); err != nil {
		t.Fatal(err)
	}
	if got := stat("renamed.txt"); fmt.Sprint(got) != "map[author:set]" {
		t.Errorf("metadata set directly: %v", got)
	}

	// A watch with entries reports the metadata of a file written.
	s := e.stream(t, "filesystem.Filesystem/WatchDir", map[string]any{"path": e.home, "includeEntry": true}, nil)
	if _, b := s.next(); !isWatchStart(b) {
		t.Fatalf("first message %s", b)
	}
	upload("renamed.txt", "third", map[string]string{"X-Metadata-Tag": "watched"}, true)
	if ev := s.waitEvent("renamed.txt", "EVENT_TYPE_WRITE"); ev.Entry == nil {
		t.Errorf("write event without its entry: %+v", ev)
	}

	// Malformed metadata: 400, nothing written.
	long := strings.Repeat("k", maxMetaKey+1)
	many := map[string]string{}
	for i := range maxMetaKeys + 1 {
		many[fmt.Sprint("X-Metadata-K", i)] = "v"
	}
	for name, m := range map[string]map[string]string{
		"empty key":        {"X-Metadata-": "v"},
		"control in value": {"X-Metadata-A": "a\tb"},
		"non-ASCII value":  {"X-Metadata-A": "é"},
		"key too long":     {"X-Metadata-" + long: "v"},
		"too large":        {"X-Metadata-A": strings.Repeat("v", maxMetaBytes)},
		"too many":         many,
	} {
		status, _, body := upload("refused.txt", "x", m, true)
		if status != 400 || !strings.Contains(body, "invalid metadata") {
			t.Errorf("%s: %d %s", name, status, body)
		}
	}
	if _, err := os.Lstat(filepath.Join(e.home, "refused.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused upload wrote its file: %v", err)
	}
}

// isWatchStart reports whether msg is the first message of a watch.
func isWatchStart(msg []byte) bool {
	var m watchResponse
	return json.Unmarshal(msg, &m) == nil && m.Start != nil && m.Filesystem == nil
}

// TestStreamInput: input through StreamInput, a client stream of
// application/connect+json envelopes (the start naming the command by
// pid, then data, keepalives ignored), reaches the command in order; the
// answer is an end of stream without an error.
func TestStreamInput(t *testing.T) {
	e := newEnv(t)
	s := e.stream(t, "process.Process/Start", map[string]any{"process": map[string]any{"cmd": "wc", "args": []string{"-c"}}, "stdin": true}, nil)
	pid := s.event().Start.PID
	var body []byte
	for _, m := range []map[string]any{
		{"start": map[string]any{"process": map[string]any{"pid": pid}}},
		{"data": map[string]any{"input": map[string]any{"stdin": base64.StdEncoding.EncodeToString([]byte("123"))}}},
		{"keepalive": map[string]any{}},
		{"data": map[string]any{"input": map[string]any{"stdin": base64.StdEncoding.EncodeToString([]byte("45"))}}},
	} {
		msg, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		body = append(body, envelope(msg)...)
	}
	in := e.rawStream(t, "process.Process/StreamInput", body, nil)
	if flags, b := in.next(); flags != 0 || string(b) != "{}" {
		t.Fatalf("answer %#x %q", flags, b)
	}
	if we := in.endOfStream(); we != nil {
		t.Fatalf("stream input: %+v", we)
	}
	e.mustCall(t, "process.Process/CloseStdin", map[string]any{"process": map[string]any{"pid": pid}}, nil)
	if stdout, _, end := s.collect(); strings.TrimSpace(stdout) != "5" || end.End.ExitCode != 0 {
		t.Errorf("wc -c: %q, %+v", stdout, *end.End)
	}
}

// TestSandboxDefaults: a sandbox's default user and working directory
// (its template's setUser and setWorkdir) apply to requests that name
// none; a user of the sandbox's own /etc/passwd may be named, and may be
// the default.
func TestSandboxDefaults(t *testing.T) {
	testutil.RequireRoot(t) // commands as other users
	e := newEnv(t)
	dir, err := os.MkdirTemp("", "envd-workdir-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e.defaults.user, e.defaults.workdir = "daemon", dir // Debian's passwd: uid 1, home /usr/sbin
	s := e.stream(t, "process.Process/Start", bashStart("id -u; pwd; echo $HOME $USER"), nil)
	s.event()
	if stdout, _, _ := s.collect(); stdout != fmt.Sprintf("1\n%s\n/usr/sbin daemon\n", dir) {
		t.Errorf("default user daemon, workdir %s: %q", dir, stdout)
	}
	// A cwd of the request wins; a user named wins.
	s = e.stream(t, "process.Process/Start", map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-c", "id -u; pwd"}, "cwd": "/"}},
		map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("root:"))})
	s.event()
	if stdout, _, _ := s.collect(); stdout != fmt.Sprintf("%d\n/\n", os.Getuid()) {
		t.Errorf("as root in /: %q", stdout)
	}
	// Names that are not accounts, or not names, are refused.
	for _, name := range []string{"no-such-user", "1000", "a:b", "../etc"} {
		s = e.stream(t, "process.Process/Start", bashStart("true"), map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte(name+":"))})
		if we := s.endOfStream(); we == nil || we.Code != codeInvalidArgument {
			t.Errorf("start as %q: %+v", name, we)
		}
	}
}

// TestStartNotApproved: a command the sandbox's approvals refuse (a deny
// rule, checked by the agent client as the daemon sets it up) never
// starts: E2B's commands.run gets permission_denied naming the rule, and
// the file the command would have made is not there.
func TestStartNotApproved(t *testing.T) {
	e := newEnv(t)
	set, err := approve.NewSet(approve.Allow, []approve.Rule{{Action: approve.Deny, Pattern: []string{"touch"}}})
	if err != nil {
		t.Fatal(err)
	}
	gate := &approve.Gate{Commands: set}
	e.agent.SetCheck(func(ctx context.Context, args, env []string) error { return gate.Command(ctx, approve.Line(args)) })
	defer e.agent.SetCheck(nil)
	marker := filepath.Join(e.home, "marker")
	s := e.stream(t, "process.Process/Start", bashStart("echo hi; touch "+marker), nil)
	if we := s.endOfStream(); we == nil || we.Code != codePermissionDenied || !strings.Contains(we.Message, "not approved") || !strings.Contains(we.Message, "touch") {
		t.Errorf("start of a denied command: %+v, want permission_denied naming touch", we)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the denied command ran: %v", err)
	}
	// What the rules allow starts as before.
	s = e.stream(t, "process.Process/Start", bashStart("echo ok"), nil)
	s.event()
	if stdout, _, _ := s.collect(); stdout != "ok\n" {
		t.Errorf("an allowed command: %q", stdout)
	}
}
