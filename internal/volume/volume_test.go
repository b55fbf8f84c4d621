package volume

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/mountinfo"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// openStore opens a store of 16 MiB volumes in a new directory, and checks
// at the end that the test left no mount or loop device of it.
func openStore(t *testing.T, max int) (*Store, string) {
	t.Helper()
	testutil.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), "volumes")
	s, err := Open(Config{Dir: dir, Size: 16 << 20, MaxVolumes: max})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.UnmountAll(); err != nil {
			t.Error(err)
		}
		checkNothingLeft(t, dir)
	})
	return s, dir
}

// checkNothingLeft fails if anything is mounted under dir or a loop
// device's backing file is under it.
func checkNothingLeft(t *testing.T, dir string) {
	t.Helper()
	ms, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if strings.HasPrefix(m.Point, dir+"/") {
			t.Errorf("left mounted: %s", m.Point)
		}
	}
	if n := loopsUnder(dir); n > 0 {
		t.Errorf("left %d loop devices of %s", n, dir)
	}
}

// loopsUnder counts the loop devices whose backing file is under dir.
func loopsUnder(dir string) int {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	n := 0
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if strings.HasPrefix(strings.TrimSpace(string(b)), dir+"/") {
			n++
		}
	}
	return n
}

// mountsAt counts the mounts at point.
func mountsAt(t *testing.T, point string) int {
	t.Helper()
	ms, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range ms {
		if m.Point == point {
			n++
		}
	}
	return n
}

func TestStoreLifecycle(t *testing.T) {
	s, dir := openStore(t, 2)
	a, err := s.Create("t1", "alpha")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(a.ID, IDPrefix) {
		t.Errorf("id %q", a.ID)
	}
	for _, name := range []string{"", "a b", "../x", strings.Repeat("x", MaxName+1), IDPrefix + "x", "é"} {
		if _, err := s.Create("t1", name); !errors.Is(err, ErrInvalid) {
			t.Errorf("Create(%q) = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := s.Create("t1", "alpha"); !errors.Is(err, ErrExists) {
		t.Errorf("second alpha: %v, want ErrExists", err)
	}
	if _, err := s.Create("t2", "alpha"); err != nil {
		t.Errorf("another tenant's alpha: %v", err)
	}
	b, err := s.Create("t1", "beta")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create("t1", "gamma"); !errors.Is(err, ErrQuota) {
		t.Errorf("third volume: %v, want ErrQuota", err)
	}
	if l := s.List("t1"); len(l) != 2 || l[0].ID != b.ID || l[1].ID != a.ID {
		t.Errorf("List = %v, want beta, alpha", l)
	}
	for _, ref := range []string{a.ID, "alpha"} {
		if v, err := s.Get("t1", ref); err != nil || v.ID != a.ID {
			t.Errorf("Get(%s) = %v, %v", ref, v, err)
		}
	}
	if _, err := s.Get("t2", a.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("t2 gets t1's volume by id: %v", err)
	}

	// The data directory: root's, 0755, on the volume's own filesystem,
	// mounted nosuid and nodev.
	data, err := s.Dir(a.ID)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(data)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o755 || st.Uid != 0 || st.Gid != 0 {
		t.Errorf("data directory: %v uid %d gid %d", fi.Mode(), st.Uid, st.Gid)
	}
	m, ok, err := mountedAt(s.MountPoint(a.ID))
	if err != nil || !ok {
		t.Fatalf("not mounted: %v", err)
	}
	for _, o := range []string{"nosuid", "nodev"} {
		if !strings.Contains(","+strings.Join(m.Options, ",")+",", ","+o+",") {
			t.Errorf("mount options %v lack %s", m.Options, o)
		}
	}
	img, _ := os.Stat(s.ImagePath(a.ID))
	if img.Size() != 16<<20 || img.Sys().(*syscall.Stat_t).Blocks*512 >= 16<<20 {
		t.Errorf("image: size %d, %d bytes allocated: want a sparse 16 MiB", img.Size(), img.Sys().(*syscall.Stat_t).Blocks*512)
	}

	// The quota: writing past the volume's size fails with ENOSPC.
	f, err := os.Create(filepath.Join(data, "big"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Write(make([]byte, 32<<20))
	f.Close()
	if !errors.Is(err, unix.ENOSPC) {
		t.Errorf("writing 32 MiB into a 16 MiB volume: %v, want ENOSPC", err)
	}
	os.Remove(filepath.Join(data, "big"))
	if err := os.WriteFile(filepath.Join(data, "kept"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}

	// A restart: a new store on the directory reuses the live mounts.
	s2, err := Open(Config{Dir: dir, Size: 16 << 20, MaxVolumes: 2})
	if err != nil {
		t.Fatal(err)
	}
	if n := mountsAt(t, s.MountPoint(a.ID)); n != 1 {
		t.Errorf("after reopening: %d mounts at %s, want 1", n, s.MountPoint(a.ID))
	}
	if got, _ := os.ReadFile(filepath.Join(data, "kept")); string(got) != "kept" {
		t.Errorf("after reopening: kept = %q", got)
	}
	if s2.Token(a.ID) != s.Token(a.ID) {
		t.Error("the token changed on reopening")
	}
	if _, ok := s2.CheckToken(a.ID, s.Token(b.ID)); ok {
		t.Error("beta's token opens alpha")
	}
	if _, ok := s2.CheckToken(a.ID, s.Token(a.ID)); !ok {
		t.Error("alpha's token does not open alpha")
	}
	// Unmounted (a reboot), the next store mounts it again.
	if err := s2.UnmountAll(); err != nil {
		t.Fatal(err)
	}
	if n := loopsUnder(dir); n != 0 {
		t.Errorf("unmounted, yet %d loop devices", n)
	}
	s3, err := Open(Config{Dir: dir, Size: 16 << 20, MaxVolumes: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(data, "kept")); string(got) != "kept" {
		t.Errorf("after remounting: kept = %q", got)
	}

	// Delete: refused while a create holds it or a sandbox uses it.
	_, held, release, err := s3.Hold("t1", "alpha")
	if err != nil || held != data {
		t.Fatalf("Hold = %s, %v", held, err)
	}
	if err := s3.Delete("t1", a.ID, nil); !errors.Is(err, ErrBusy) {
		t.Errorf("Delete while held: %v, want ErrBusy", err)
	}
	release()
	release()
	busy := func(v Volume, d string) (bool, error) { return d == data, nil }
	if err := s3.Delete("t1", a.ID, busy); !errors.Is(err, ErrBusy) {
		t.Errorf("Delete while used: %v, want ErrBusy", err)
	}
	if err := s3.Delete("t2", a.ID, nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("t2 deletes t1's volume: %v", err)
	}
	if err := s3.Delete("t1", "alpha", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s3.ImagePath(a.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("image left: %v", err)
	}
	if n := mountsAt(t, s3.MountPoint(a.ID)); n != 0 {
		t.Errorf("deleted, yet mounted")
	}
	if _, err := s3.Get("t1", "alpha"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Delete: %v", err)
	}
	if _, err := s3.Create("t1", "alpha"); err != nil {
		t.Errorf("alpha again: %v", err)
	}
	if err := s3.UnmountAll(); err != nil {
		t.Error(err)
	}
}

func TestContent(t *testing.T) {
	s, _ := openStore(t, 0)
	v, err := s.Create("t", "c")
	if err != nil {
		t.Fatal(err)
	}
	data, err := s.Dir(v.ID)
	if err != nil {
		t.Fatal(err)
	}
	r, err := OpenRoot(data)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	e, err := r.Write("/a.txt", strings.NewReader("hello"), false, Attrs{})
	if err != nil {
		t.Fatal(err)
	}
	if e.Name != "a.txt" || e.Path != "/a.txt" || e.Type != "file" || e.Size != 5 || e.Mode != 0o644 || e.UID != 0 {
		t.Errorf("Write: %+v", e)
	}
	if _, err := r.Write("a.txt", strings.NewReader("x"), false, Attrs{}); !errors.Is(err, ErrExists) {
		t.Errorf("Write without force over a file: %v", err)
	}
	uid, mode := uint32(1000), uint32(0o600)
	if e, err = r.Write("a.txt", strings.NewReader("bye"), true, Attrs{UID: &uid, GID: &uid, Mode: &mode}); err != nil || e.UID != 1000 || e.GID != 1000 || e.Mode != 0o600 {
		t.Errorf("Write with force: %+v, %v", e, err)
	}
	f, e, err := r.Open("/a.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(f)
	f.Close()
	if string(got) != "bye" {
		t.Errorf("read %q", got)
	}
	if _, err := r.Write("/no/such/file", strings.NewReader("x"), false, Attrs{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("Write under a missing directory: %v", err)
	}
	if _, err := r.Write("/x", strings.NewReader("x"), false, Attrs{Mode: new(uint32(0o4755))}); !errors.Is(err, ErrInvalid) {
		t.Errorf("setuid mode: %v", err)
	}
	if _, err := r.Write("/big", io.LimitReader(zeros{}, 32<<20), false, Attrs{}); !errors.Is(err, ErrFull) {
		t.Errorf("a write past the quota: %v, want ErrFull", err)
	}

	if _, err := r.Mkdir("/d/e/f", false, Attrs{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("Mkdir without force, parents missing: %v", err)
	}
	if e, err = r.Mkdir("/d/e/f", true, Attrs{UID: &uid}); err != nil || e.Type != "directory" || e.Mode != 0o755 || e.UID != 1000 {
		t.Errorf("Mkdir with force: %+v, %v", e, err)
	}
	if _, err := r.Mkdir("/d/e/f", false, Attrs{}); !errors.Is(err, ErrExists) {
		t.Errorf("Mkdir of an existing directory: %v", err)
	}
	if _, err := r.Mkdir("/d/e/f", true, Attrs{}); err != nil {
		t.Errorf("Mkdir with force of an existing directory: %v", err)
	}
	if _, err := r.Write("/d/e/f/g.txt", strings.NewReader("g"), false, Attrs{}); err != nil {
		t.Fatal(err)
	}
	l, err := r.List("/", 0)
	if err != nil || len(l) != 2 || l[0].Path != "/a.txt" || l[1].Path != "/d" {
		t.Errorf("List / = %+v, %v", l, err)
	}
	if l, err = r.List("/d", 3); err != nil || len(l) != 3 || l[2].Path != "/d/e/f/g.txt" {
		t.Errorf("List /d depth 3 = %+v, %v", l, err)
	}
	if _, err := r.List("/", MaxDepth+1); !errors.Is(err, ErrInvalid) {
		t.Errorf("depth past the bound: %v", err)
	}
	if _, err := r.List("/nope", 1); !errors.Is(err, ErrNotFound) {
		t.Errorf("List of a missing directory: %v", err)
	}
	if e, err = r.Change("/d", Attrs{Mode: new(uint32(0o700)), GID: &uid}); err != nil || e.Mode != 0o700 || e.GID != 1000 {
		t.Errorf("Change: %+v, %v", e, err)
	}
	if err := r.Remove("/d"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Stat("/d"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Stat after Remove: %v", err)
	}
	if err := r.Remove("/"); !errors.Is(err, ErrInvalid) {
		t.Errorf("Remove /: %v", err)
	}
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) { clear(b); return len(b), nil }

// TestContentEscapes: what a sandbox writes in a volume (symlinks out of
// it, loops, magic links, FIFOs) cannot make the content API read,
// change or remove anything outside it.
func TestContentEscapes(t *testing.T) {
	s, _ := openStore(t, 0)
	v, err := s.Create("t", "e")
	if err != nil {
		t.Fatal(err)
	}
	data, err := s.Dir(v.ID)
	if err != nil {
		t.Fatal(err)
	}
	r, err := OpenRoot(data)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	// As a sandbox would leave them.
	for name, target := range map[string]string{
		"shadow": "/etc/shadow", "out": outside, "up": "../../../..", "updir": "../../..",
		"self": "/proc/self/root", "loop1": "loop2", "loop2": "loop1", "in": "inside.txt",
	} {
		if err := os.Symlink(target, filepath.Join(data, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(data, "inside.txt"), []byte("in"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(data, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"shadow", "out", "up/etc/shadow", "updir/etc/passwd", "self/etc/shadow", "loop1", "fifo", "/../../../etc/shadow", "../etc/shadow"} {
		f, _, err := r.Open(p)
		if err == nil {
			b, _ := io.ReadAll(f)
			f.Close()
			t.Errorf("Open(%q) read %d bytes", p, len(b))
			continue
		}
		if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrNotFound) {
			t.Errorf("Open(%q): %v, want ErrInvalid or ErrNotFound", p, err)
		}
	}
	if f, _, err := r.Open("in"); err != nil {
		t.Errorf("a symlink inside the volume: %v", err)
	} else {
		f.Close()
	}
	if e, err := r.Stat("shadow"); err != nil || e.Type != "symlink" || e.Target != "/etc/shadow" {
		t.Errorf("Stat of a symlink: %+v, %v", e, err)
	}
	// Writes through symlinks that lead out are refused; a forced write
	// over one replaces the symlink, not its target.
	// (Were the property broken, they would write beside the test's
	// own file.)
	for _, p := range []string{"up" + filepath.Dir(outside) + "/x", "self" + filepath.Dir(outside) + "/y", "updir/x"} {
		if _, err := r.Write(p, strings.NewReader("x"), true, Attrs{}); err == nil {
			t.Errorf("Write(%q) succeeded", p)
		}
		if _, err := r.Mkdir(p, true, Attrs{}); err == nil {
			t.Errorf("Mkdir(%q) succeeded", p)
		}
	}
	if _, err := r.Write("out", strings.NewReader("overwritten"), true, Attrs{}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "secret" {
		t.Errorf("the file outside became %q", b)
	}
	if fi, _ := os.Lstat(filepath.Join(data, "out")); !fi.Mode().IsRegular() {
		t.Errorf("out is %v, want the new file", fi.Mode())
	}
	// Changes and removals do not follow the last symlink, nor go
	// through one out. (Were the property broken, they would change the
	// test's own file, never /etc/shadow.)
	uid := uint32(1234)
	before, _ := os.Lstat(outside)
	if err := os.Symlink(outside, filepath.Join(data, "out2")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Change("out2", Attrs{Mode: new(uint32(0o666))}); !errors.Is(err, ErrInvalid) {
		t.Errorf("chmod of a symlink: %v", err)
	}
	if _, err := r.Change("out2", Attrs{UID: &uid}); err != nil {
		t.Errorf("chown of a symlink: %v", err)
	}
	if _, err := r.Change("up"+outside, Attrs{UID: &uid}); err == nil {
		t.Error("chown through a symlink out of the volume succeeded")
	}
	if after, _ := os.Lstat(outside); after.Mode() != before.Mode() || after.Sys().(*syscall.Stat_t).Uid != before.Sys().(*syscall.Stat_t).Uid {
		t.Errorf("the file outside changed: %v uid %d", after.Mode(), after.Sys().(*syscall.Stat_t).Uid)
	}
	if err := r.Remove("updir"); err != nil {
		t.Errorf("Remove of a symlink: %v", err)
	}
	if err := r.Remove("up" + outside); err == nil {
		t.Error("Remove through a symlink out of the volume succeeded")
	}
	if err := r.Remove("out2"); err != nil {
		t.Errorf("Remove of a symlink: %v", err)
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("the file outside: %v", err)
	}
	if _, err := r.List("up", 1); err == nil {
		t.Error("List through a symlink out of the volume succeeded")
	}
	if _, _, err := r.Open("a\x00b"); !errors.Is(err, ErrInvalid) {
		t.Errorf("a NUL in a path: %v", err)
	}
	if _, _, err := r.Open(strings.Repeat("a/", MaxPath)); !errors.Is(err, ErrInvalid) {
		t.Errorf("a long path: %v", err)
	}
}

// TestBrokenImage: a volume whose image does not mount keeps neither the
// store nor the other volumes from working; it is refused when used, and
// can be deleted.
func TestBrokenImage(t *testing.T) {
	s, dir := openStore(t, 0)
	good, err := s.Create("t", "good")
	if err != nil {
		t.Fatal(err)
	}
	bad, err := s.Create("t", "bad")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.UnmountAll(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.ImagePath(bad.ID), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(Config{Dir: dir, Size: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s2.UnmountAll() })
	if err := s2.MountErrors(); err == nil || !strings.Contains(err.Error(), bad.ID) {
		t.Errorf("MountErrors = %v, want one naming %s", err, bad.ID)
	}
	if _, err := s2.Dir(good.ID); err != nil {
		t.Errorf("the good volume: %v", err)
	}
	if _, err := s2.Dir(bad.ID); err == nil {
		t.Error("the broken volume mounted")
	}
	if err := s2.Delete("t", "bad", nil); err != nil {
		t.Errorf("Delete of the broken volume: %v", err)
	}
}

// TestListBounds: a listing is sorted across batches of the directory's
// entries, and one of more than MaxListEntries is refused, not truncated.
func TestListBounds(t *testing.T) {
	s, _ := openStore(t, 0)
	v, err := s.Create("t", "many")
	if err != nil {
		t.Fatal(err)
	}
	data, err := s.Dir(v.ID)
	if err != nil {
		t.Fatal(err)
	}
	r, err := OpenRoot(data)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := os.Mkdir(filepath.Join(data, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 600 {
		if err := os.WriteFile(filepath.Join(data, "d", fmt.Sprintf("f%04d", 599-i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l, err := r.List("/d", 1)
	if err != nil || len(l) != 600 {
		t.Fatalf("List: %d entries, %v", len(l), err)
	}
	for i, e := range l {
		if want := fmt.Sprintf("/d/f%04d", i); e.Path != want {
			t.Fatalf("entry %d is %s, want %s", i, e.Path, want)
		}
	}
	// Hard links: names without inodes, of which the small volume has
	// too few.
	for i := 600; i <= MaxListEntries; i++ {
		if err := os.Link(filepath.Join(data, "d", "f0000"), filepath.Join(data, "d", fmt.Sprintf("g%05d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.List("/", 2); !errors.Is(err, ErrInvalid) {
		t.Errorf("a listing of more than %d entries: %v, want ErrInvalid", MaxListEntries, err)
	}
}

// TestMountedElsewhere: an image whose filesystem is still mounted
// elsewhere (a mount namespace that outlived the store's mount, here a
// bind mount) is mounted again through the same loop device, never
// attached to a second one.
func TestMountedElsewhere(t *testing.T) {
	s, dir := openStore(t, 0)
	v, err := s.Create("t", "shared")
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "other")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(s.MountPoint(v.ID), other, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unix.Unmount(other, 0); err != nil {
			t.Error(err)
		}
	}()
	if err := s.UnmountAll(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, DataDir, "seen"), []byte("seen"), 0o644); err != nil {
		t.Fatal(err)
	}
	data, err := s.Dir(v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if n := loopsUnder(dir); n != 1 {
		t.Errorf("%d loop devices of the image, want 1", n)
	}
	if b, err := os.ReadFile(filepath.Join(data, "seen")); err != nil || string(b) != "seen" {
		t.Errorf("the file written elsewhere: %q, %v", b, err)
	}
}
