package sandbox

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// describe is what the view at root shows, entry by entry: type, mode,
// owner, size and content, link target, a user extended attribute, the
// modification time of what is not a directory, and which entries are
// one file (hard links).
func describe(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	inodes := map[uint64]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		s := fmt.Sprintf("%o %d:%d", st.Mode, st.Uid, st.Gid)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s += fmt.Sprintf(" %x", sha256.Sum256(b))
			if first, ok := inodes[st.Ino]; ok {
				s += " same as " + first
			} else {
				inodes[st.Ino] = rel
			}
		case unix.S_IFLNK:
			target, _ := os.Readlink(p)
			s += " -> " + target
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			s += fmt.Sprintf(" mtime %d.%d", st.Mtim.Sec, st.Mtim.Nsec)
		}
		buf := make([]byte, 64)
		if n, err := unix.Lgetxattr(p, "user.hutch-test", buf); err == nil {
			s += " xattr " + string(buf[:n])
		}
		out[rel] = s
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSaveLayer: a root layer saved (SaveLayer) and made again from the
// copy (RootLayer.From) shows what the first one showed — files, owners,
// modes, times, extended attributes, links, hard links, fifos, removed
// and replaced lower entries — with the directories hidden since added
// and a symbolic link never followed.
func TestSaveLayer(t *testing.T) {
	testutil.RequireRoot(t)
	// The test's mounts in a mount namespace of its own: a clone of the
	// host's mount tree made meanwhile (a gVisor hutch run's root) would
	// hold copies of them, and keep their mount points busy. The thread
	// is never unlocked: it ends with the test, and the namespace with it.
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		t.Fatal(err)
	}
	host := t.TempDir() // the lower layer: a host's root
	for _, f := range []string{"etc/keep", "etc/gone", "etc/closed", "etc/sub/old", "hidden/secret", "newhidden/secret"} {
		if err := os.MkdirAll(filepath.Join(host, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(host, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	keep, first, second, saved := filepath.Join(dir, "keep"), filepath.Join(dir, "first"), filepath.Join(dir, "second"), filepath.Join(dir, "saved")
	for _, d := range []string{keep, first, second} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	unmount := func(p string) { _ = unix.Unmount(p, unix.MNT_DETACH) }
	t.Cleanup(func() { unmount(first); unmount(second); unmount(keep) })
	l := RootLayer{SizeBytes: 64 << 20, Hide: []string{"/hidden"}, Remove: []string{"/etc/closed"}, Keep: keep}
	if err := MountLayerRoot(first, host, &l, nil, "/work"); err != nil {
		t.Fatal(err)
	}

	// What a sandbox would write.
	at := func(p string) string { return filepath.Join(first, p) }
	steps := []func() error{
		func() error { return os.WriteFile(at("work/file"), []byte("data"), 0o640) },
		func() error { return os.Chown(at("work/file"), 12345, 23456) },
		func() error { return unix.Setxattr(at("work/file"), "user.hutch-test", []byte("kept"), 0) },
		func() error {
			old := time.Date(2001, 2, 3, 4, 5, 6, 7, time.UTC)
			return os.Chtimes(at("work/file"), old, old)
		},
		func() error { return os.Link(at("work/file"), at("work/hard")) },
		func() error { return os.Symlink("/etc/keep", at("work/link")) },
		func() error { return os.Symlink(host, at("work/out")) },
		func() error { return unix.Mkfifo(at("work/fifo"), 0o600) },
		func() error { return os.MkdirAll(at("work/d/e"), 0o750) },
		func() error { return os.Chmod(at("work/d"), 0o2775) },
		func() error { return os.Remove(at("etc/gone")) },
		func() error { return os.RemoveAll(at("etc/sub")) },
		func() error { return os.Mkdir(at("etc/sub"), 0o755) },
		func() error { return os.WriteFile(at("etc/sub/new"), []byte("new"), 0o600) },
		func() error { return os.WriteFile(at("hidden/mine"), []byte("mine"), 0o600) },
		func() error { return os.WriteFile(at("etc/keep"), []byte("changed"), 0o644) },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	want := describe(t, first)
	unmount(first)
	if err := SaveLayer(keep, saved); err != nil {
		t.Fatal(err)
	}
	unmount(keep)

	// Made again from the copy, with a directory hidden since.
	l.Keep, l.From = "", saved
	l.Hide = append(l.Hide, "/newhidden")
	if err := MountLayerRoot(second, host, &l, nil, "/work"); err != nil {
		t.Fatal(err)
	}
	got := describe(t, second)
	delete(want, "newhidden/secret")
	if _, ok := want["hidden/secret"]; ok {
		t.Errorf("the first layer showed a hidden file")
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if k != "newhidden" && got[k] != want[k] { // a hidden directory shows the host's attributes
			t.Errorf("%s: restored %q, saved %q", k, got[k], want[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: in the restored layer only: %q", k, got[k])
		}
	}
	if got["etc/gone"] != "" || got["etc/sub/old"] != "" || got["etc/closed"] != "" {
		t.Errorf("removed entries are back: %q %q %q", got["etc/gone"], got["etc/sub/old"], got["etc/closed"])
	}
	if !strings.Contains(got["work/hard"], "same as work/file") {
		t.Errorf("the hard link is a copy: %q", got["work/hard"])
	}
	// The copy holds the link, never what it points to.
	if fi, err := os.Lstat(filepath.Join(saved, "work", "out")); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("the saved copy of a link: %v, %v", fi, err)
	}
}
