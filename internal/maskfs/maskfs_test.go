package maskfs

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// mounted mounts f on a directory of its own and returns that directory.
// The mount is made in a mount namespace of the test's locked thread, so
// that no other process sees it, and dropped at the end.
func mounted(t *testing.T, f *FS) (dir string, do func(func())) {
	t.Helper()
	testutil.RequireRoot(t)
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testutil.Need(t, false, "needs /dev/fuse: "+err.Error())
	}
	dir = t.TempDir()
	calls := make(chan func())
	done := make(chan struct{})
	ready := make(chan error)
	go func() {
		// This thread never goes back to the scheduler's pool: it leaves
		// with its mount namespace.
		runtime.LockOSThread()
		defer close(done)
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			ready <- err
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			ready <- err
			return
		}
		mnt, err := f.Mount()
		if err == nil {
			err = unix.MoveMount(mnt, "", unix.AT_FDCWD, dir, unix.MOVE_MOUNT_F_EMPTY_PATH)
			unix.Close(mnt)
		}
		ready <- err
		if err != nil {
			return
		}
		for c := range calls {
			c()
		}
		_ = unix.Unmount(dir, unix.MNT_DETACH)
	}()
	if err := <-ready; err != nil {
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() {
		close(calls)
		<-done
		f.Close()
	})
	return dir, func(c func()) {
		ran := make(chan struct{})
		calls <- func() { c(); close(ran) }
		<-ran
	}
}

type recorder struct {
	mu  sync.Mutex
	got []Refusal
}

func (r *recorder) record(x Refusal) { r.mu.Lock(); r.got = append(r.got, x); r.mu.Unlock() }
func (r *recorder) take() []Refusal {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.got
	r.got = nil
	return out
}

// TestStandIns: through the kernel, a hidden node refuses every access
// with EACCES and a stand-in every change with EROFS, each refusal
// recorded with the covered path and what was tried; reading a stand-in
// gives its content, and questions (stat, access W_OK) are answered
// without a record.
func TestStandIns(t *testing.T) {
	var rec recorder
	nodes := []Node{
		{Name: "f0", Hidden: true, Path: "/home/u/.aws/credentials"},
		{Name: "d0", Dir: true, Hidden: true, Path: "/home/u/.ssh"},
		{Name: "p0", Mode: 0o444, Path: "/ws/.bashrc"},
		{Name: "p1", Dir: true, Mode: 0o555, Path: "/ws/.vscode"},
		{Name: "r", Mode: 0o444, Data: []byte("nameserver 127.0.0.1\n")},
	}
	f := New(nodes, 0, 0, rec.record)
	dir, do := mounted(t, f)
	at := func(n string) string { return filepath.Join(dir, n) }
	errno := func(err error) error {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return pe.Err
		}
		var le *os.LinkError
		if errors.As(err, &le) {
			return le.Err
		}
		return err
	}
	type step struct {
		what string
		run  func() error
		want error
		rec  []Refusal
	}
	steps := []step{
		{"read a hidden file", func() error { _, err := os.ReadFile(at("f0")); return err }, unix.EACCES,
			[]Refusal{{0, "/home/u/.aws/credentials", OpRead}}},
		{"write a hidden file", func() error { return os.WriteFile(at("f0"), []byte("x"), 0o644) }, unix.EACCES,
			[]Refusal{{0, "/home/u/.aws/credentials", OpWrite}}},
		{"list a hidden directory", func() error { _, err := os.ReadDir(at("d0")); return err }, unix.EACCES,
			[]Refusal{{1, "/home/u/.ssh", OpRead}}},
		{"read below a hidden directory", func() error { _, err := os.ReadFile(at("d0/id_ed25519")); return err }, unix.EACCES,
			[]Refusal{{1, "/home/u/.ssh/id_ed25519", OpRead}}},
		{"create below a hidden directory", func() error { return os.WriteFile(at("d0/new"), nil, 0o600) }, unix.EACCES,
			[]Refusal{{1, "/home/u/.ssh/new", OpRead}}},
		{"enter a hidden directory", func() error { return unix.Access(at("d0"), unix.X_OK) }, unix.EACCES,
			[]Refusal{{1, "/home/u/.ssh", OpRead}}},
		{"stat a hidden file", func() error { _, err := os.Stat(at("f0")); return err }, nil, nil},
		{"read a stand-in", func() error {
			b, err := os.ReadFile(at("p0"))
			if err == nil && len(b) != 0 {
				return errors.New("not empty")
			}
			return err
		}, nil, nil},
		{"write a stand-in", func() error { return os.WriteFile(at("p0"), []byte("x"), 0o644) }, unix.EROFS,
			[]Refusal{{2, "/ws/.bashrc", OpWrite}}},
		{"truncate a stand-in", func() error { return os.Truncate(at("p0"), 0) }, unix.EROFS,
			[]Refusal{{2, "/ws/.bashrc", OpChange}}},
		{"chmod a stand-in", func() error { return os.Chmod(at("p0"), 0o777) }, unix.EROFS,
			[]Refusal{{2, "/ws/.bashrc", OpChange}}},
		{"ask to write a stand-in", func() error { return unix.Access(at("p0"), unix.W_OK) }, unix.EROFS, nil},
		{"list a stand-in directory", func() error {
			e, err := os.ReadDir(at("p1"))
			if err == nil && len(e) != 0 {
				return errors.New("not empty")
			}
			return err
		}, nil, nil},
		{"create in a stand-in directory", func() error { return os.WriteFile(at("p1/settings.json"), nil, 0o644) }, unix.EROFS,
			[]Refusal{{3, "/ws/.vscode/settings.json", OpCreate}}},
		{"make a directory in a stand-in directory", func() error { return os.Mkdir(at("p1/sub"), 0o755) }, unix.EROFS,
			[]Refusal{{3, "/ws/.vscode/sub", OpCreate}}},
		{"link into a stand-in directory", func() error { return os.Symlink("x", at("p1/l")) }, unix.EROFS,
			[]Refusal{{3, "/ws/.vscode/l", OpCreate}}},
		{"read a missing name in a stand-in directory", func() error { _, err := os.ReadFile(at("p1/none")); return err }, unix.ENOENT, nil},
		{"read content", func() error {
			b, err := os.ReadFile(at("r"))
			if err == nil && string(b) != "nameserver 127.0.0.1\n" {
				return errors.New("content " + string(b))
			}
			return err
		}, nil, nil},
		{"write content", func() error { return os.WriteFile(at("r"), nil, 0o644) }, unix.EROFS, nil},
		{"remove at the root", func() error { return os.Remove(at("p0")) }, unix.EROFS, nil},
		{"set an attribute", func() error { return unix.Setxattr(at("p0"), "user.x", []byte("1"), 0) }, unix.EROFS,
			[]Refusal{{2, "/ws/.bashrc", OpChange}}},
	}
	for _, s := range steps {
		var err error
		do(func() { err = s.run() })
		if got := errno(err); !errors.Is(got, s.want) && !(s.want == nil && err == nil) {
			t.Errorf("%s: %v, want %v", s.what, err, s.want)
		}
		if got := rec.take(); !slices.Equal(got, s.rec) {
			t.Errorf("%s: recorded %v, want %v", s.what, got, s.rec)
		}
	}
	var names []string
	do(func() {
		es, err := os.ReadDir(dir)
		if err != nil {
			t.Errorf("list the root: %v", err)
		}
		for _, e := range es {
			names = append(names, e.Name())
		}
	})
	if want := []string{"d0", "f0", "p0", "p1", "r"}; !slices.Equal(names, want) {
		t.Errorf("the root lists %v, want %v", names, want)
	}
}

// TestAnswerMalformed: requests cut short get an error, never a panic or
// a read past them.
func TestAnswerMalformed(t *testing.T) {
	f := New([]Node{{Name: "f", Hidden: true, Path: "/x"}, {Name: "p", Mode: 0o444, Data: []byte("abc")}}, 0, 0, nil)
	for op := uint32(0); op < 60; op++ {
		for _, node := range []uint64{0, rootID, 2, 3, 4, 1 << 40} {
			for n := inHeaderLen; n < inHeaderLen+40; n++ {
				req := make([]byte, n)
				ne.PutUint32(req, uint32(n))
				ne.PutUint32(req[4:], op)
				ne.PutUint64(req[16:], node)
				for i := inHeaderLen; i < n; i++ {
					req[i] = 0xff
				}
				out := f.answer(req, nil)
				if len(out) > 0 && int(ne.Uint32(out)) != len(out) {
					t.Fatalf("op %d node %d len %d: reply length %d of %d", op, node, n, ne.Uint32(out), len(out))
				}
			}
		}
	}
}

// FuzzAnswer: whatever a request holds, the reply is well-formed.
func FuzzAnswer(f *testing.F) {
	fs := New([]Node{{Name: "f", Hidden: true, Path: "/x"}, {Name: "d", Dir: true, Mode: 0o555, Path: "/y"}}, 0, 0, func(Refusal) {})
	seed := make([]byte, inHeaderLen+16)
	ne.PutUint32(seed[4:], opLookup)
	ne.PutUint64(seed[16:], rootID)
	copy(seed[inHeaderLen:], "f\x00")
	f.Add(seed)
	f.Fuzz(func(t *testing.T, req []byte) {
		if len(req) < inHeaderLen {
			return
		}
		out := fs.answer(req, nil)
		if len(out) > 0 && (len(out) < outHeaderLen || int(ne.Uint32(out)) != len(out)) {
			t.Fatalf("reply %x", out)
		}
	})
}
