package layer

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// ent is one tar entry of a test layer.
type ent = imagetest.Entry

func layerOf(t *testing.T, ents ...ent) []byte { return imagetest.Tar(t, ents...) }

var userOpaque = Options{OpaqueXattr: "user.overlay.opaque"}

func unpack(t *testing.T, opt Options, ents ...ent) (string, Report, error) {
	t.Helper()
	dir := t.TempDir()
	t.Cleanup(func() { writable(dir) })
	rep, err := Unpack(bytes.NewReader(layerOf(t, ents...)), dir, opt)
	return dir, rep, err
}

// writable makes the directories below dir writable again, so that an
// ordinary user's test can remove what a layer made read-only.
func writable(dir string) {
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
}

// TestUnpack: a layer's files, directories, links and fifos are made with
// their modes, contents and times; parents a layer does not list are made;
// read-only directories still take their entries; set-id bits and file
// capabilities are stripped and reported, device nodes skipped and
// reported; whiteouts become what overlayfs reads, and no ".wh." name is
// made; a later entry of the same name replaces an earlier one.
func TestUnpack(t *testing.T) {
	dir, rep, err := unpack(t, userOpaque,
		ent{Name: "./etc/", Type: tar.TypeDir, Mode: 0o755},
		ent{Name: "etc/hostname", Mode: 0o644, Body: "box\n"},
		ent{Name: "usr/bin/tool", Mode: 0o4755, Body: "#!/bin/sh\n"},
		ent{Name: "usr/bin/cap", Mode: 0o755, Body: "x", PAX: map[string]string{"SCHILY.xattr.security.capability": "\x01"}},
		ent{Name: "usr/bin/link", Type: tar.TypeSymlink, Link: "tool"},
		ent{Name: "usr/bin/hard", Type: tar.TypeLink, Link: "usr/bin/tool"},
		ent{Name: "ro/", Type: tar.TypeDir, Mode: 0o555},
		ent{Name: "ro/inside", Mode: 0o600, Body: "in"},
		ent{Name: "fifo", Type: tar.TypeFifo, Mode: 0o644},
		ent{Name: "dev/sda", Type: tar.TypeBlock, Mode: 0o660},
		ent{Name: "dev/null", Type: tar.TypeChar, Mode: 0o666},
		ent{Name: "gone/.wh.old", Mode: 0o644},
		ent{Name: "opaque/.wh..wh..opq", Mode: 0o644},
		ent{Name: "dup", Mode: 0o644, Body: "first"},
		ent{Name: "dup", Type: tar.TypeDir, Mode: 0o755},
		ent{Name: "dup/x", Mode: 0o644, Body: "x"},
		ent{Name: "dup", Mode: 0o644, Body: "second"},
	)
	if err != nil {
		t.Fatal(err)
	}
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			t.Errorf("%s: %v", p, err)
		}
		return string(b)
	}
	if read("etc/hostname") != "box\n" || read("ro/inside") != "in" || read("dup") != "second" {
		t.Error("contents differ")
	}
	st := func(p string) unix.Stat_t {
		var s unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, p), &s); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		return s
	}
	if m := st("usr/bin/tool").Mode; m&0o7777 != 0o755 {
		t.Errorf("tool mode %o, want the set-id bit stripped", m)
	}
	if m := st("ro").Mode; m&0o777 != 0o555 {
		t.Errorf("ro mode %o", m)
	}
	if m := st("usr").Mode; m&0o777 != 0o755 {
		t.Errorf("an implicit parent's mode %o", m)
	}
	if st("usr/bin/hard").Ino != st("usr/bin/tool").Ino {
		t.Error("the hard link is not one")
	}
	if l, _ := os.Readlink(filepath.Join(dir, "usr/bin/link")); l != "tool" {
		t.Errorf("link %q", l)
	}
	if st("fifo").Mode&unix.S_IFMT != unix.S_IFIFO {
		t.Error("fifo")
	}
	if st("etc/hostname").Mtim.Sec != 1_700_000_000 {
		t.Error("mtime")
	}
	if _, err := os.Lstat(filepath.Join(dir, "dev/sda")); !os.IsNotExist(err) {
		t.Error("a device node was made")
	}
	if w := st("gone/old"); w.Mode&unix.S_IFMT != unix.S_IFCHR || w.Rdev != 0 {
		t.Errorf("whiteout: mode %o rdev %d", w.Mode, w.Rdev)
	}
	if v, err := getxattr(filepath.Join(dir, "opaque"), "user.overlay.opaque"); err != nil || v != "y" {
		t.Errorf("opaque: %q, %v", v, err)
	}
	if sz, _ := unix.Lgetxattr(filepath.Join(dir, "usr/bin/cap"), "security.capability", nil); sz > 0 {
		t.Error("a file capability was set")
	}
	_ = filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error {
		if strings.HasPrefix(filepath.Base(p), ".wh.") {
			t.Errorf("a whiteout name was made: %s", p)
		}
		return nil
	})
	joined := strings.Join(rep.Stripped, "\n") + "\n" + strings.Join(rep.Skipped, "\n")
	for _, want := range []string{"usr/bin/tool: set-id bits", "usr/bin/cap: file capability", "dev/sda: a device node", "dev/null: a device node"} {
		if !strings.Contains(joined, want) {
			t.Errorf("report lacks %q:\n%s", want, joined)
		}
	}
}

func getxattr(p, name string) (string, error) {
	b := make([]byte, 64)
	n, err := unix.Lgetxattr(p, name, b)
	if err != nil {
		return "", err
	}
	return string(b[:n]), nil
}

// TestUnpackHostile: entries that would reach outside the layer — "..",
// absolute names, a symbolic link made by an earlier entry used as a
// parent, hard links out or through a link — are refused with the
// entry's name, and nothing outside the layer changes; a name that is not
// UTF-8 is refused; a symbolic link replaced by a file is replaced, never
// written through.
func TestUnpackHostile(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(outside, []byte("safe"), 0o644); err != nil {
		t.Fatal(err)
	}
	outDir := filepath.Dir(outside)
	for _, c := range []struct {
		what string
		ents []ent
		want error
	}{
		{"dot-dot", []ent{{Name: "../victim", Body: "x"}}, ErrEscape},
		{"dot-dot deep", []ent{{Name: "a/b/../../../victim", Body: "x"}}, ErrEscape},
		{"absolute", []ent{{Name: outside, Body: "x"}}, ErrEscape},
		{"symlink parent", []ent{{Name: "l", Type: tar.TypeSymlink, Link: outDir}, {Name: "l/victim", Body: "x"}}, ErrLinkParent},
		{"relative symlink parent", []ent{{Name: "a/", Type: tar.TypeDir, Mode: 0o755}, {Name: "a/l", Type: tar.TypeSymlink, Link: "../../../../../../.." + outDir}, {Name: "a/l/victim", Body: "x"}}, ErrLinkParent},
		{"hard link out", []ent{{Name: "h", Type: tar.TypeLink, Link: "../victim"}}, ErrLinkTarget},
		{"hard link absolute", []ent{{Name: "h", Type: tar.TypeLink, Link: outside}}, ErrLinkTarget},
		{"hard link through a symlink", []ent{{Name: "l", Type: tar.TypeSymlink, Link: outDir}, {Name: "h", Type: tar.TypeLink, Link: "l/victim"}}, ErrLinkTarget},
		{"whiteout through a symlink", []ent{{Name: "l", Type: tar.TypeSymlink, Link: outDir}, {Name: "l/.wh.victim", Body: ""}}, ErrLinkParent},
		{"not UTF-8", []ent{{Name: "bad\xff\xfe", Body: "x"}}, ErrBadName},
		{"whiteout of dot-dot", []ent{{Name: "a/.wh...", Body: ""}}, ErrEscape},
	} {
		t.Run(c.what, func(t *testing.T) {
			_, _, err := unpack(t, userOpaque, c.ents...)
			var ee *EntryError
			if !errors.Is(err, c.want) || !errors.As(err, &ee) || ee.Entry == "" {
				t.Errorf("got %v, want %v naming the entry", err, c.want)
			}
			if b, _ := os.ReadFile(outside); string(b) != "safe" {
				t.Fatalf("the file outside the layer changed: %q", b)
			}
			if es, _ := os.ReadDir(outDir); len(es) != 1 {
				t.Fatalf("something was made outside the layer: %v", es)
			}
		})
	}
	dir, _, err := unpack(t, userOpaque, ent{Name: "x", Type: tar.TypeSymlink, Link: outside}, ent{Name: "x", Body: "inside"})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "safe" {
		t.Fatalf("a file was written through a symbolic link: %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "x")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the link was not replaced: %v", err)
	}
}

// TestUnpackBounds: a decompression bomb stops at the byte limit, and a
// layer of too many entries at the entry limit, each with a clear error.
func TestUnpackBounds(t *testing.T) {
	var big bytes.Buffer
	tw := tar.NewWriter(&big)
	if err := tw.WriteHeader(&tar.Header{Name: "zeros", Mode: 0o644, Size: 64 << 20, Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(tw, zeroReader{}, 64<<20); err != nil {
		t.Fatal(err)
	}
	tw.Close()
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	zw.Write(big.Bytes())
	zw.Close()
	zr, err := gzip.NewReader(&gz)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Unpack(zr, t.TempDir(), Options{Limits: Limits{Bytes: 1 << 20}})
	if !errors.Is(err, ErrTooLarge) || rep.Bytes > 2<<20 {
		t.Errorf("a %d-byte gzip of 64 MiB: %v after %d bytes", gz.Len(), err, rep.Bytes)
	}
	var many []ent
	for i := range 50 {
		many = append(many, ent{Name: "f" + string(rune('a'+i%26)) + string(rune('a'+i/26)), Body: "x"})
	}
	if _, _, err := unpack(t, Options{Limits: Limits{Entries: 10}}, many...); !errors.Is(err, ErrTooMany) {
		t.Errorf("50 entries, limit 10: %v", err)
	}
}

type zeroReader struct{}

func (zeroReader) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// FuzzUnpack: whatever the stream holds, nothing is made outside the
// layer and Unpack returns.
func FuzzUnpack(f *testing.F) {
	f.Add([]byte{})
	outer := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		dir, err := os.MkdirTemp(outer, "l")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		_, _ = Unpack(bytes.NewReader(b), dir, Options{Limits: Limits{Bytes: 1 << 20, Entries: 100}})
		if es, _ := os.ReadDir(outer); len(es) != 1 {
			t.Fatalf("something was made beside the layer: %v", es)
		}
	})
}

// TestUnpackAsUser runs the tests above as an ordinary user (an ordinary
// user's hutch unpacks its own images).
func TestUnpackAsUser(t *testing.T) {
	testutil.RunAsUser(t, "^(TestUnpack|TestUnpackHostile|TestUnpackBounds)$")
}

// TestUnpackTimes: a directory keeps its entry's time after the entries
// below it are made, and a whiteout gets its entry's time.
func TestUnpackTimes(t *testing.T) {
	dir, _, err := unpack(t, userOpaque,
		ent{Name: "d/", Type: tar.TypeDir, Mode: 0o755},
		ent{Name: "d/f", Mode: 0o644, Body: "x"},
		ent{Name: "d/sub/", Type: tar.TypeDir, Mode: 0o755},
		ent{Name: "d/sub/.wh.gone", Mode: 0o644},
		ent{Name: "d/sub/g", Mode: 0o644, Body: "y"},
	)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"d", "d/sub", "d/sub/gone"} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, p), &st); err != nil || st.Mtim.Sec != 1_700_000_000 {
			t.Errorf("%s: modified at %d, %v; want its entry's time 1700000000", p, st.Mtim.Sec, err)
		}
	}
}
