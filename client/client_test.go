package client_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/client"
)

func newSandbox(t *testing.T, c *client.Client) *client.Sandbox {
	t.Helper()
	ctx := context.Background()
	sb, err := c.Create(ctx, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Destroy(ctx, sb.ID) })
	return sb
}

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		host string
		ok   bool
	}{
		{"unix:///run/hutch/hutch.sock", true},
		{"http://127.0.0.1:7070", true},
		{"https://hutch.example.com", true},
		{"http://[::1]:7070/prefix", true},
		{"unix://relative/path", false},
		{"unix://", false},
		{"ftp://host", false},
		{"127.0.0.1:7070", false},
		{"http://", false},
		{"http://user:pw@host", false},
	} {
		_, err := client.New(tc.host, "")
		if (err == nil) != tc.ok {
			t.Errorf("New(%q): %v", tc.host, err)
		}
	}
}

// TestEnvironment checks that an empty host and token come from
// HUTCH_HOST and HUTCH_TOKEN, and that the zero Client works.
func TestEnvironment(t *testing.T) {
	ctx := context.Background()
	var zero client.Client
	if err := zero.Health(ctx); err != nil {
		t.Fatalf("zero Client on $HUTCH_HOST: %v", err)
	}
	t.Setenv("HUTCH_HOST", testTCP)
	c, err := client.New("", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Health(ctx); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("TCP without a token: %v", err)
	}
	tok, err := testManager.Store().CreateToken(ctx, "env-tenant")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("HUTCH_TOKEN", tok)
	c, err = client.New("", "")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Create(ctx, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy(ctx, sb.ID)
	if sb.Tenant != "env-tenant" {
		t.Errorf("tenant %q", sb.Tenant)
	}
}

func TestSandboxes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var c client.Client
	sb, err := c.Create(ctx, client.CreateOptions{
		Labels: map[string]string{"suite": "client", "n": "1"}, Env: map[string]string{"X": "y"},
		Timeout: time.Hour, Policy: []byte(`{"resources":{"pids":64}}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID == "" || sb.State != "running" || sb.Tenant != "admin" || sb.Labels["suite"] != "client" || time.Until(sb.ExpiresAt) < 59*time.Minute {
		t.Errorf("created %+v", sb)
	}
	got, err := c.Get(ctx, sb.ID)
	if err != nil || got.ID != sb.ID {
		t.Errorf("get: %+v, %v", got, err)
	}
	list, err := c.List(ctx, client.ListOptions{Labels: map[string]string{"suite": "client", "n": "1"}, State: "running"})
	if err != nil || len(list) != 1 || list[0].ID != sb.ID {
		t.Errorf("list: %+v, %v", list, err)
	}
	ext, err := c.Extend(ctx, sb.ID, 2*time.Hour)
	if err != nil || time.Until(ext.ExpiresAt) < 119*time.Minute {
		t.Errorf("extend: %+v, %v", ext, err)
	}
	if err := c.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	_, err = c.Get(ctx, sb.ID)
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 404 || e.Code != client.CodeNotFound || !errors.Is(err, client.ErrNotFound) ||
		!errors.Is(err, fs.ErrNotExist) || errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), sb.ID) {
		t.Errorf("get after destroy: %#v", err)
	}
	if err := c.Destroy(ctx, sb.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("destroy twice: %v", err)
	}
	if _, err := c.Create(ctx, client.CreateOptions{Policy: []byte(`{"resources":{"memory":"lots"}}`)}); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("bad policy: %v", err)
	}
}

func TestTenants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tokA, err := testManager.Store().CreateToken(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	tokB, err := testManager.Store().CreateToken(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := client.New(testTCP, tokA)
	b, _ := client.New(testTCP, tokB)
	sb := newSandbox(t, a)
	if _, err := b.Get(ctx, sb.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("tenant b gets a's sandbox: %v", err)
	}
	if _, err := b.Run(ctx, sb.ID, client.Command{Args: []string{"true"}}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("tenant b runs in a's sandbox: %v", err)
	}
	if _, err := b.Exec(ctx, sb.ID, client.Command{Args: []string{"true"}}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("tenant b execs in a's sandbox: %v", err)
	}
	if _, err := a.Create(ctx, client.CreateOptions{Policy: []byte(`{"filesystem":{"allow_write":["/"]}}`)}); !errors.Is(err, client.ErrPermission) {
		t.Errorf("a remote tenant asks for a writable host: %v", err)
	}
	// The stream works over TCP too.
	p, err := a.Exec(ctx, sb.ID, client.Command{Args: []string{"echo", "over tcp"}})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(p.Stdout)
	if st, err := p.Wait(); err != nil || st.Code != 0 || string(out) != "over tcp\n" {
		t.Errorf("exec over TCP: %q, %+v, %v", out, st, err)
	}
}

func TestRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var c client.Client
	sb := newSandbox(t, &c)
	res, err := c.Run(ctx, sb.ID, client.Command{Args: []string{"sh", "-c", "cat; printf '\\377' >&2; exit 7"}, Input: []byte("in\x00put")})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "in\x00put" || string(res.Stderr) != "\xff" || res.Code != 7 || res.PID <= 0 {
		t.Errorf("run: %+v", res)
	}
	res, err = c.Run(ctx, sb.ID, client.Command{Args: []string{"sleep", "5"}, Timeout: 50 * time.Millisecond})
	if err != nil || !res.TimedOut {
		t.Errorf("timeout: %+v, %v", res, err)
	}
	res, err = c.Run(ctx, sb.ID, client.Command{Args: []string{"head", "-c", "2000000", "/dev/zero"}})
	if err != nil || !res.Truncated || len(res.Stdout) != 1<<20 {
		t.Errorf("truncated: %v, %d bytes, %v", res.Truncated, len(res.Stdout), err)
	}
	if _, err := c.Run(ctx, sb.ID, client.Command{Args: []string{"no-such-command"}}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("missing command: %v", err)
	}
	if _, err := c.Run(ctx, sb.ID, client.Command{Args: []string{"cat"}, Stdin: true}); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("Run with Stdin: %v", err)
	}
}

// readAll reads a process's output streams concurrently.
func readAll(p *client.Process) (stdout, stderr string) {
	var wg sync.WaitGroup
	var o, e []byte
	wg.Add(2)
	go func() { defer wg.Done(); o, _ = io.ReadAll(p.Stdout) }()
	go func() { defer wg.Done(); e, _ = io.ReadAll(p.Stderr) }()
	wg.Wait()
	return string(o), string(e)
}

func TestExec(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var c client.Client
	sb := newSandbox(t, &c)

	p, err := c.Exec(ctx, sb.ID, client.Command{Args: []string{"sh", "-c", "wc -c; echo err >&2; exit 4"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, _ = p.Stdin.Write(bytes.Repeat([]byte("x"), 300000))
		_ = p.Stdin.Close()
	}()
	out, errOut := readAll(p)
	st, err := p.Wait()
	if err != nil || st.Code != 4 || strings.TrimSpace(out) != "300000" || errOut != "err\n" {
		t.Errorf("stdin: %q %q %+v %v", out, errOut, st, err)
	}

	p, err = c.Exec(ctx, sb.ID, client.Command{Args: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Stdin != nil {
		t.Error("Stdin without Command.Stdin")
	}
	ps, err := c.Processes(ctx, sb.ID)
	if err != nil || !slices.ContainsFunc(ps, func(i client.ProcessInfo) bool { return i.PID == p.PID }) {
		t.Errorf("processes %+v, %v; want %d", ps, err, p.PID)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	readAll(p)
	if st, err := p.Wait(); err != nil || st.Signal != 15 {
		t.Errorf("signalled: %+v %v", st, err)
	}
	if err := p.Signal(syscall.SIGTERM); err == nil {
		t.Error("Signal after the end")
	}

	p, err = c.Exec(ctx, sb.ID, client.Command{Args: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SignalProcess(ctx, sb.ID, p.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	readAll(p)
	if st, err := p.Wait(); err != nil || st.Signal != 9 {
		t.Errorf("SignalProcess: %+v %v", st, err)
	}
	if err := c.SignalProcess(ctx, sb.ID, p.PID, syscall.SIGKILL); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("SignalProcess after the end: %v", err)
	}

	p, err = c.Exec(ctx, sb.ID, client.Command{Args: []string{"sh", "-c", "read x; stty size"}, Stdin: true, TTY: true, Rows: 5, Cols: 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Resize(40, 120); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	_, _ = io.WriteString(p.Stdin, "\n")
	out, errOut = readAll(p)
	if st, err := p.Wait(); err != nil || !strings.HasSuffix(strings.ReplaceAll(out, "\r", ""), "40 120\n") || errOut != "" {
		t.Errorf("resize: %q %q %+v %v", out, errOut, st, err)
	}

	// Close kills the command.
	p, err = c.Exec(ctx, sb.ID, client.Command{Args: []string{"sleep", "33"}})
	if err != nil {
		t.Fatal(err)
	}
	pid := p.PID
	_ = p.Close()
	if _, err := p.Wait(); err == nil {
		t.Error("Wait after Close: no error")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ps, err := c.Processes(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(ps, func(i client.ProcessInfo) bool { return i.PID == pid }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d survives Close", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}

	if _, err := c.Exec(ctx, sb.ID, client.Command{Args: []string{"cat"}, Input: []byte("x")}); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("Exec with Input: %v", err)
	}
	// The sandbox ends under a running stream: an error, not a status.
	sb2 := newSandbox(t, &c)
	p, err = c.Exec(ctx, sb2.ID, client.Command{Args: []string{"sleep", "34"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Destroy(ctx, sb2.ID); err != nil {
		t.Fatal(err)
	}
	readAll(p)
	if _, err := p.Wait(); !errors.Is(err, client.ErrConflict) {
		t.Errorf("sandbox destroyed under a stream: %v", err)
	}
}

func TestFiles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var c client.Client
	sb := newSandbox(t, &c)
	dir := sb.Workspace + "/d"
	if err := c.Mkdir(ctx, sb.ID, dir+"/sub", true); err != nil {
		t.Fatal(err)
	}
	if err := c.Mkdir(ctx, sb.ID, dir, false); !errors.Is(err, client.ErrConflict) {
		t.Errorf("mkdir of an existing directory: %v", err)
	}
	content := bytes.Repeat([]byte("0123456789"), 100000)
	if n, err := c.WriteFile(ctx, sb.ID, dir+"/f", bytes.NewReader(content), 0o750|os.ModeSetgid); err != nil || n != int64(len(content)) {
		t.Fatalf("write: %d, %v", n, err)
	}
	fi, err := c.Stat(ctx, sb.ID, dir+"/f")
	if err != nil || fi.Size != int64(len(content)) || fi.Mode != 0o750|os.ModeSetgid || fi.IsDir || fi.Name != "f" {
		t.Errorf("stat: %+v, %v", fi, err)
	}
	var buf bytes.Buffer
	if n, err := c.ReadFile(ctx, sb.ID, dir+"/f", &buf); err != nil || n != int64(len(content)) || !bytes.Equal(buf.Bytes(), content) {
		t.Errorf("read: %d, %v", n, err)
	}
	if err := c.Rename(ctx, sb.ID, dir+"/f", dir+"/sub/g"); err != nil {
		t.Fatal(err)
	}
	list, err := c.ListFiles(ctx, sb.ID, dir)
	if err != nil || len(list) != 1 || list[0].Name != "sub" || !list[0].IsDir || !list[0].Mode.IsDir() {
		t.Errorf("list: %+v, %v", list, err)
	}
	if err := c.Remove(ctx, sb.ID, dir, false); !errors.Is(err, client.ErrConflict) {
		t.Errorf("remove a full directory: %v", err)
	}
	if err := c.Remove(ctx, sb.ID, dir, true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stat(ctx, sb.ID, dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stat after remove: %v", err)
	}
	if _, err := c.WriteFile(ctx, sb.ID, sb.Workspace+"/big", bytes.NewReader(make([]byte, 9<<20)), 0); !errors.Is(err, client.ErrTooLarge) {
		t.Errorf("over the upload limit: %v", err)
	}
	if _, err := c.ReadFile(ctx, sb.ID, "relative", io.Discard); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("relative path: %v", err)
	}
}

func TestArchive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var c client.Client
	sb := newSandbox(t, &c)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range []struct{ name, body string }{{"a.txt", "A"}, {"sub/b.txt", "BB"}} {
		_ = tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.body)), Typeflag: tar.TypeReg})
		_, _ = tw.Write([]byte(e.body))
	}
	_ = tw.WriteHeader(&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "sub/b.txt"})
	_ = tw.Close()
	n, err := c.Upload(ctx, sb.ID, sb.Workspace+"/tree", bytes.NewReader(buf.Bytes()))
	if err != nil || n != 3 {
		t.Fatalf("upload: %d, %v", n, err)
	}
	if b, err := os.ReadFile(filepath.Join(sb.Workspace, "tree/l")); err != nil || string(b) != "BB" {
		t.Errorf("through the symlink: %q, %v", b, err)
	}
	var out bytes.Buffer
	if err := c.Download(ctx, sb.ID, sb.Workspace+"/tree", &out); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&out)
	var names []string
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
	}
	if !slices.Equal(names, []string{"a.txt", "l", "sub/", "sub/b.txt"}) {
		t.Errorf("downloaded %v", names)
	}

	buf.Reset()
	tw = tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: "../../escaped", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte("x"))
	_ = tw.Close()
	if _, err := c.Upload(ctx, sb.ID, sb.Workspace+"/tree", &buf); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("traversal: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(sb.Workspace, "../escaped")); err == nil {
		t.Error("the traversal wrote a file")
	}
}
