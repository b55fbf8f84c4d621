package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestFiles(t *testing.T) {
	noLeaks(t)
	c, _ := agentPair(t, ServeOptions{}, false)
	ctx := context.Background()
	dir := t.TempDir()
	a := filepath.Join(dir, "a.bin")

	data := make([]byte, 5<<20+123)
	rand.Read(data)
	n, err := c.WriteFile(ctx, a, bytes.NewReader(data), 0o600)
	if err != nil || n != int64(len(data)) {
		t.Fatalf("write: %d, %v", n, err)
	}
	var got bytes.Buffer
	if n, err := c.ReadFile(ctx, a, &got); err != nil || n != int64(len(data)) || !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("read back: %d bytes, %v", n, err)
	}
	fi, err := c.Stat(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Name != "a.bin" || fi.Size != int64(len(data)) || fi.Mode != 0o600 || fi.IsDir || fi.Link != "" || time.Since(fi.ModTime) > time.Minute {
		t.Errorf("stat: %+v", fi)
	}

	// Mode 0 keeps the mode of the file replaced, or makes 0644.
	if _, err := c.WriteFile(ctx, a, strings.NewReader("small"), 0); err != nil {
		t.Fatal(err)
	}
	if fi, _ := c.Stat(ctx, a); fi.Mode != 0o600 || fi.Size != 5 {
		t.Errorf("rewritten with mode 0: %+v", fi)
	}
	empty := filepath.Join(dir, "empty")
	if n, err := c.WriteFile(ctx, empty, strings.NewReader(""), 0); err != nil || n != 0 {
		t.Fatalf("write empty: %d, %v", n, err)
	}
	if fi, _ := c.Stat(ctx, empty); fi.Mode != 0o644 || fi.Size != 0 {
		t.Errorf("new file with mode 0: %+v", fi)
	}
	if fi, _ := c.Stat(ctx, "/"); fi.Name != "/" || !fi.IsDir {
		t.Errorf("stat /: %+v", fi)
	}

	// Directories.
	deep := filepath.Join(dir, "x", "y", "z")
	if err := c.Mkdir(ctx, deep, true); err != nil {
		t.Fatal(err)
	}
	if err := c.Mkdir(ctx, deep, true); err != nil {
		t.Errorf("mkdir -p of an existing directory: %v", err)
	}
	agentError(t, c.Mkdir(ctx, deep, false), CodeExists)
	agentError(t, c.Mkdir(ctx, filepath.Join(dir, "q", "r"), false), CodeNotFound)
	if err := c.Mkdir(ctx, filepath.Join(dir, "plain"), false); err != nil {
		t.Fatal(err)
	}

	// Symlinks: described themselves, followed when read.
	if err := os.Symlink("a.bin", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/nowhere", filepath.Join(dir, "dangling")); err != nil {
		t.Fatal(err)
	}
	fi, err = c.Stat(ctx, filepath.Join(dir, "link"))
	if err != nil || fi.Link != "a.bin" || fi.Mode&fs.ModeSymlink == 0 || fi.IsDir {
		t.Errorf("stat link: %+v, %v", fi, err)
	}
	if fi, err := c.Stat(ctx, filepath.Join(dir, "dangling")); err != nil || fi.Link != "/nowhere" {
		t.Errorf("stat dangling link: %+v, %v", fi, err)
	}
	got.Reset()
	if _, err := c.ReadFile(ctx, filepath.Join(dir, "link"), &got); err != nil || got.String() != "small" {
		t.Errorf("read through link: %q, %v", got.String(), err)
	}

	list, err := c.List(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range list {
		names = append(names, e.Name)
		switch e.Name {
		case "x", "plain":
			if !e.IsDir || !e.Mode.IsDir() {
				t.Errorf("%s is not a directory: %+v", e.Name, e)
			}
		case "link":
			if e.Link != "a.bin" {
				t.Errorf("link: %+v", e)
			}
		}
	}
	if want := []string{"a.bin", "dangling", "empty", "link", "plain", "x"}; !slices.Equal(names, want) {
		t.Errorf("list: %q, want %q", names, want)
	}

	// Rename and remove.
	b := filepath.Join(dir, "b.bin")
	if err := c.Rename(ctx, a, b); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stat(ctx, a); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stat after rename: %v", err)
	}
	agentError(t, c.Remove(ctx, filepath.Join(dir, "x"), false), CodeExists)
	if err := c.Remove(ctx, filepath.Join(dir, "x"), true); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx, filepath.Join(dir, "plain"), false); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx, b, false); err != nil {
		t.Fatal(err)
	}
	agentError(t, c.Remove(ctx, b, false), CodeNotFound)
	agentError(t, c.Remove(ctx, b, true), CodeNotFound)
	if _, err := os.Lstat(filepath.Join(dir, "x")); !os.IsNotExist(err) {
		t.Errorf("x still exists: %v", err)
	}
}

func TestFileErrors(t *testing.T) {
	noLeaks(t)
	c, _ := agentPair(t, ServeOptions{}, false)
	ctx := context.Background()
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	tests := []struct {
		name   string
		op     func() error
		code   string
		target error
	}{
		{"relative path", func() error { _, err := c.Stat(ctx, "etc/passwd"); return err }, CodeInvalid, os.ErrInvalid},
		{"empty path", func() error { _, err := c.List(ctx, ""); return err }, CodeInvalid, os.ErrInvalid},
		{"NUL in path", func() error { return c.Mkdir(ctx, "/tmp/a\x00b", false) }, CodeInvalid, os.ErrInvalid},
		{"relative rename target", func() error { return c.Rename(ctx, file, "b") }, CodeInvalid, os.ErrInvalid},
		{"stat missing", func() error { _, err := c.Stat(ctx, missing); return err }, CodeNotFound, os.ErrNotExist},
		{"read missing", func() error { _, err := c.ReadFile(ctx, missing, io.Discard); return err }, CodeNotFound, os.ErrNotExist},
		{"read directory", func() error { _, err := c.ReadFile(ctx, dir, io.Discard); return err }, CodeIsDir, syscall.EISDIR},
		{"read fifo", func() error { _, err := c.ReadFile(ctx, fifo, io.Discard); return err }, CodeInvalid, os.ErrInvalid},
		{"list file", func() error { _, err := c.List(ctx, file); return err }, CodeNotDir, syscall.ENOTDIR},
		{"list missing", func() error { _, err := c.List(ctx, missing); return err }, CodeNotFound, os.ErrNotExist},
		{"mkdir under file", func() error { return c.Mkdir(ctx, filepath.Join(file, "sub"), true) }, CodeNotDir, syscall.ENOTDIR},
		{"mkdir existing", func() error { return c.Mkdir(ctx, file, false) }, CodeExists, os.ErrExist},
		{"write without parent", func() error {
			_, err := c.WriteFile(ctx, filepath.Join(missing, "f"), strings.NewReader("data"), 0o644)
			return err
		}, CodeNotFound, os.ErrNotExist},
		{"write over directory", func() error { _, err := c.WriteFile(ctx, dir, strings.NewReader("data"), 0o644); return err }, CodeIsDir, syscall.EISDIR},
		{"write to dot", func() error { _, err := c.WriteFile(ctx, dir+"/..", strings.NewReader("data"), 0o644); return err }, CodeInvalid, os.ErrInvalid},
		{"remove root", func() error { return c.Remove(ctx, "//", true) }, CodeInvalid, os.ErrInvalid},
		{"rename missing", func() error { return c.Rename(ctx, missing, file) }, CodeNotFound, os.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.op()
			agentError(t, err, tt.code)
			if !errors.Is(err, tt.target) {
				t.Errorf("errors.Is(%v, %v) is false", err, tt.target)
			}
		})
	}
	// The agent checks paths itself too.
	for _, m := range []*request{
		{Op: opStat, Path: "rel"},
		{Op: opList, Path: "a\x00"},
		{Op: opRead, Path: "rel"},
		{Op: opMkdir, Path: ""},
		{Op: opRemove, Path: "rel"},
		{Op: opRename, Path: "/a", To: "b"},
	} {
		_, _, err := c.roundTrip(ctx, m, nil)
		agentError(t, err, CodeInvalid)
	}
	// An error's message names the operation and the path, never the
	// temporary file.
	_, err := c.WriteFile(ctx, filepath.Join(missing, "f"), strings.NewReader("x"), 0)
	if e := agentError(t, err, CodeNotFound); e.Message != "write "+filepath.Join(missing, "f")+": no such file or directory" {
		t.Errorf("message %q", e.Message)
	}
}

func TestCodeOf(t *testing.T) {
	tests := []struct {
		err  error
		code string
	}{
		{&fs.PathError{Op: "open", Path: "/x", Err: syscall.ENOENT}, CodeNotFound},
		{&os.LinkError{Op: "rename", Old: "/a", New: "/b", Err: syscall.EEXIST}, CodeExists},
		{syscall.ENOTEMPTY, CodeExists},
		{syscall.EACCES, CodePermissionDenied},
		{syscall.EPERM, CodePermissionDenied},
		{syscall.EROFS, CodePermissionDenied},
		{syscall.ENOTDIR, CodeNotDir},
		{syscall.EISDIR, CodeIsDir},
		{syscall.ELOOP, CodeInvalid},
		{syscall.ENAMETOOLONG, CodeInvalid},
		{syscall.EXDEV, CodeInvalid},
		{syscall.ENOSPC, CodeTooLarge},
		{syscall.EFBIG, CodeTooLarge},
		{syscall.EIO, CodeInternal},
		{fs.ErrNotExist, CodeNotFound},
		{errors.New("something"), CodeInternal},
	}
	for _, tt := range tests {
		if got := codeOf(tt.err); got != tt.code {
			t.Errorf("codeOf(%v) = %q, want %q", tt.err, got, tt.code)
		}
	}
	e := &Error{Code: CodePermissionDenied, Message: "open /x: permission denied"}
	if !errors.Is(fmt.Errorf("wrapped: %w", e), os.ErrPermission) || errors.Is(e, os.ErrNotExist) {
		t.Error("errors.Is on *Error")
	}
	if !errors.Is(e, &Error{Code: CodePermissionDenied}) || errors.Is(e, &Error{Code: CodePermissionDenied, Message: "other"}) {
		t.Error("errors.Is between *Errors")
	}
}

// blockingReader yields first, then blocks until release is closed, then
// yields rest (or fails with err).
type blockingReader struct {
	first, rest []byte
	reached     chan struct{}
	release     chan struct{}
	err         error
	state       int
}

func (r *blockingReader) Read(p []byte) (int, error) {
	switch r.state {
	case 0:
		n := copy(p, r.first)
		r.first = r.first[n:]
		if len(r.first) == 0 {
			r.state = 1
		}
		return n, nil
	case 1:
		close(r.reached)
		<-r.release
		if r.err != nil {
			return 0, r.err
		}
		r.state = 2
		fallthrough
	default:
		if len(r.rest) == 0 {
			return 0, io.EOF
		}
		n := copy(p, r.rest)
		r.rest = r.rest[n:]
		return n, nil
	}
}

// TestAtomicWrite checks that a write in progress, failed or canceled
// never shows a part of the new content at its path, and leaves no
// temporary file behind, whether it renames or writes in place.
func TestAtomicWrite(t *testing.T) {
	for _, inPlace := range []bool{false, true} {
		t.Run(fmt.Sprintf("inPlace=%v", inPlace), func(t *testing.T) { testAtomicWrite(t, inPlace) })
	}
}

func testAtomicWrite(t *testing.T, inPlace bool) {
	noLeaks(t)
	c, _ := agentPair(t, ServeOptions{}, false)
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	newData := bytes.Repeat([]byte("n"), 3<<20)
	content := func() string {
		t.Helper()
		var b bytes.Buffer
		if _, err := c.ReadFile(ctx, path, &b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	noTemp := func() {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			ents, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(ents) == 1 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("entries left: %v", ents)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	for _, tc := range []struct {
		name   string
		err    error
		cancel bool
	}{
		{name: "completes"},
		{name: "source fails", err: errors.New("source broke")},
		{name: "canceled", cancel: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &blockingReader{first: newData[:1<<20], rest: newData[1<<20:], reached: make(chan struct{}), release: make(chan struct{}), err: tc.err}
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := c.WriteFileWith(wctx, path, r, WriteOptions{Mode: 0o644, InPlace: inPlace})
				done <- err
			}()
			<-r.reached
			time.Sleep(50 * time.Millisecond) // let the first MiB land in the temporary file
			if got := content(); got != "old" {
				t.Fatalf("content during the write: %d bytes", len(got))
			}
			if tc.cancel {
				cancel()
			}
			close(r.release)
			err := <-done
			switch {
			case tc.cancel:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("canceled write: %v", err)
				}
			case tc.err != nil:
				if !errors.Is(err, tc.err) {
					t.Errorf("failed write: %v", err)
				}
			case err != nil:
				t.Fatal(err)
			}
			want := "old"
			if tc.err == nil && !tc.cancel {
				want = string(newData)
				defer os.WriteFile(path, []byte("old"), 0o644)
			}
			if got := content(); got != want {
				t.Errorf("content after: %d bytes, want %d", len(got), len(want))
			}
			noTemp()
		})
	}
}

// TestWriteInPlace checks writes in place: the file keeps its inode, a new
// one is made, extended attributes of the prefix are replaced (others
// kept), a symlink at the path is replaced rather than followed, and a
// file the write made is gone again when the write fails.
func TestWriteInPlace(t *testing.T) {
	noLeaks(t)
	c, _ := agentPair(t, ServeOptions{}, false)
	ctx := context.Background()
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	const prefix = "user.test."
	write := func(p, content string, xattrs map[string]string) error {
		t.Helper()
		_, err := c.WriteFileWith(ctx, p, strings.NewReader(content), WriteOptions{InPlace: true, XattrPrefix: prefix, Xattrs: xattrs})
		return err
	}
	ino := func(p string) uint64 {
		t.Helper()
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	if err := write(f, "first", map[string]string{"author": "a", "purpose": "p"}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setxattr(f, "user.other", []byte("kept"), 0); err != nil {
		t.Fatalf("the test's filesystem keeps no user extended attributes: %v", err)
	}
	before := ino(f)
	fi, err := c.StatXattrs(ctx, f, prefix)
	if err != nil || fi.Size != 5 || fi.Mode != 0o644 || len(fi.Xattrs) != 2 || fi.Xattrs["author"] != "a" || fi.Xattrs["purpose"] != "p" {
		t.Fatalf("stat after the first write: %+v, %v", fi, err)
	}
	if fi, _ := c.Stat(ctx, f); fi.Xattrs != nil {
		t.Errorf("Stat without a prefix: xattrs %v", fi.Xattrs)
	}
	if err := write(f, "second!", map[string]string{"author": "b"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(f); string(got) != "second!" || ino(f) != before {
		t.Errorf("rewritten: %q, inode %d (was %d)", got, ino(f), before)
	}
	ents, err := c.ListXattrs(ctx, dir, prefix)
	if err != nil || len(ents) != 1 || len(ents[0].Xattrs) != 1 || ents[0].Xattrs["author"] != "b" {
		t.Errorf("list after the second write: %+v, %v", ents, err)
	}
	buf := make([]byte, 16)
	if n, err := syscall.Getxattr(f, "user.other", buf); err != nil || string(buf[:n]) != "kept" {
		t.Errorf("an attribute of another prefix: %q, %v", buf[:n], err)
	}
	// An attribute set in the sandbox is read as the writes' are.
	if err := syscall.Setxattr(f, prefix+"set", []byte("outside"), 0); err != nil {
		t.Fatal(err)
	}
	if fi, _ := c.StatXattrs(ctx, f, prefix); fi.Xattrs["set"] != "outside" {
		t.Errorf("attribute set outside the agent: %v", fi.Xattrs)
	}

	// A symlink at the path is replaced, its target untouched.
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("target"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := write(link, "new", nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(target); string(got) != "target" {
		t.Errorf("the symlink's target was written: %q", got)
	}
	if fi, err := os.Lstat(link); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the symlink was not replaced: %v, %v", fi, err)
	}

	// A new file whose write fails is removed.
	fresh := filepath.Join(dir, "fresh")
	broke := errors.New("source broke")
	r := &blockingReader{first: []byte("part"), reached: make(chan struct{}), release: make(chan struct{}), err: broke}
	close(r.release)
	if _, err := c.WriteFileWith(ctx, fresh, r, WriteOptions{InPlace: true}); !errors.Is(err, broke) {
		t.Errorf("failed write: %v", err)
	}
	if _, err := os.Lstat(fresh); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a failed write of a new file left it: %v", err)
	}

	// Bounds and prefixes.
	agentError(t, write(f, "x", map[string]string{"": "v"}), CodeInvalid)
	big := map[string]string{}
	for i := range 65 {
		big[fmt.Sprint("k", i)] = "v"
	}
	agentError(t, write(f, "x", big), CodeTooLarge)
	agentError(t, write(f, "x", map[string]string{"k": strings.Repeat("v", 9<<10)}), CodeTooLarge)
	_, err = c.StatXattrs(ctx, f, "trusted.")
	agentError(t, err, CodeInvalid)
	if got, _ := os.ReadFile(f); string(got) != "second!" {
		t.Errorf("refused writes changed the file: %q", got)
	}
}

func TestListLarge(t *testing.T) {
	noLeaks(t)
	c, _ := agentPair(t, ServeOptions{}, false)
	dir := t.TempDir()
	const n = 3000 // several entries frames
	for i := range n {
		name := fmt.Sprintf("%s-%05d", strings.Repeat("f", 100), i)
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A name that is not UTF-8 survives the trip.
	odd := "bad-\xff\xfe-name"
	if err := os.WriteFile(filepath.Join(dir, odd), []byte("odd"), 0o644); err != nil {
		t.Fatal(err)
	}
	list, err := c.List(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != n+1 || list[0].Name != odd || !strings.HasSuffix(list[n].Name, "-02999") {
		t.Fatalf("listed %d entries, first %q", len(list), list[0].Name)
	}
	var b bytes.Buffer
	if _, err := c.ReadFile(context.Background(), filepath.Join(dir, list[0].Name), &b); err != nil || b.String() != "odd" {
		t.Errorf("read %q: %q, %v", list[0].Name, b.String(), err)
	}
}

// TestExportLayer: an agent with ServeOptions.ExportLayer streams what
// it writes, larger than a frame and its window; its error reaches the
// client; an agent without one answers that it cannot.
func TestExportLayer(t *testing.T) {
	noLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	want := bytes.Repeat([]byte("layer bytes "), 200_000) // 2.4 MB
	var fail atomic.Bool
	c, _ := agentPair(t, ServeOptions{ExportLayer: func(w io.Writer) error {
		if fail.Load() {
			w.Write(want[:100])
			return errors.New("the layer broke")
		}
		_, err := w.Write(want)
		return err
	}}, false)
	var got bytes.Buffer
	if n, err := c.ExportLayer(ctx, &got); err != nil || n != int64(len(want)) || !bytes.Equal(got.Bytes(), want) {
		t.Errorf("export: %d bytes, %v; want %d the same", n, err, len(want))
	}
	fail.Store(true)
	if _, err := c.ExportLayer(ctx, io.Discard); err == nil || !strings.Contains(err.Error(), "the layer broke") {
		t.Errorf("a failing export: %v", err)
	}
	c2, _ := agentPair(t, ServeOptions{}, false)
	if _, err := c2.ExportLayer(ctx, io.Discard); err == nil || !strings.Contains(err.Error(), "its tier keeps its layer on the host") {
		t.Errorf("an agent without an export: %v", err)
	}
}
