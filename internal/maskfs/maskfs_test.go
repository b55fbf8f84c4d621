package maskfs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

type recorder struct {
	mu  sync.Mutex
	got []Refusal
}

func (r *recorder) record(x Refusal) { r.mu.Lock(); r.got = append(r.got, x); r.mu.Unlock() }

// standInNodes are the nodes TestStandIns serves.
var standInNodes = []Node{
	{Name: "f0", Hidden: true, Path: "/home/u/.aws/credentials"},
	{Name: "d0", Dir: true, Hidden: true, Path: "/home/u/.ssh"},
	{Name: "p0", Mode: 0o444, Path: "/ws/.bashrc"},
	{Name: "p1", Dir: true, Mode: 0o555, Path: "/ws/.vscode"},
	{Name: "r", Mode: 0o444, Data: []byte("nameserver 127.0.0.1\n")},
}

// step is one thing a client tries on the mounted filesystem (at gives a
// node's path there), what it must end with, and what hutch must record.
type step struct {
	what string
	run  func(at func(string) string) error
	want error
	rec  []Refusal
}

func empty(b []byte, err error) error {
	if err == nil && len(b) != 0 {
		return errors.New("not empty")
	}
	return err
}

var standInSteps = []step{
	{"read a hidden file", func(at func(string) string) error { _, err := os.ReadFile(at("f0")); return err }, unix.EACCES,
		[]Refusal{{0, "/home/u/.aws/credentials", OpRead}}},
	{"write a hidden file", func(at func(string) string) error { return os.WriteFile(at("f0"), []byte("x"), 0o644) }, unix.EACCES,
		[]Refusal{{0, "/home/u/.aws/credentials", OpWrite}}},
	{"list a hidden directory", func(at func(string) string) error { _, err := os.ReadDir(at("d0")); return err }, unix.EACCES,
		[]Refusal{{1, "/home/u/.ssh", OpRead}}},
	{"read below a hidden directory", func(at func(string) string) error { _, err := os.ReadFile(at("d0/id_ed25519")); return err }, unix.EACCES,
		[]Refusal{{1, "/home/u/.ssh/id_ed25519", OpRead}}},
	{"create below a hidden directory", func(at func(string) string) error { return os.WriteFile(at("d0/new"), nil, 0o600) }, unix.EACCES,
		[]Refusal{{1, "/home/u/.ssh/new", OpRead}}},
	{"enter a hidden directory", func(at func(string) string) error { return unix.Access(at("d0"), unix.X_OK) }, unix.EACCES,
		[]Refusal{{1, "/home/u/.ssh", OpRead}}},
	{"stat a hidden file", func(at func(string) string) error { _, err := os.Stat(at("f0")); return err }, nil, nil},
	{"read a stand-in", func(at func(string) string) error { return empty(os.ReadFile(at("p0"))) }, nil, nil},
	{"write a stand-in", func(at func(string) string) error { return os.WriteFile(at("p0"), []byte("x"), 0o644) }, unix.EROFS,
		[]Refusal{{2, "/ws/.bashrc", OpWrite}}},
	{"truncate a stand-in", func(at func(string) string) error { return os.Truncate(at("p0"), 0) }, unix.EROFS,
		[]Refusal{{2, "/ws/.bashrc", OpChange}}},
	{"chmod a stand-in", func(at func(string) string) error { return os.Chmod(at("p0"), 0o777) }, unix.EROFS,
		[]Refusal{{2, "/ws/.bashrc", OpChange}}},
	{"ask to write a stand-in", func(at func(string) string) error { return unix.Access(at("p0"), unix.W_OK) }, unix.EROFS, nil},
	{"list a stand-in directory", func(at func(string) string) error {
		e, err := os.ReadDir(at("p1"))
		if err == nil && len(e) != 0 {
			return errors.New("not empty")
		}
		return err
	}, nil, nil},
	{"create in a stand-in directory", func(at func(string) string) error { return os.WriteFile(at("p1/settings.json"), nil, 0o644) }, unix.EROFS,
		[]Refusal{{3, "/ws/.vscode/settings.json", OpCreate}}},
	{"make a directory in a stand-in directory", func(at func(string) string) error { return os.Mkdir(at("p1/sub"), 0o755) }, unix.EROFS,
		[]Refusal{{3, "/ws/.vscode/sub", OpCreate}}},
	{"link into a stand-in directory", func(at func(string) string) error { return os.Symlink("x", at("p1/l")) }, unix.EROFS,
		[]Refusal{{3, "/ws/.vscode/l", OpCreate}}},
	{"read a missing name in a stand-in directory", func(at func(string) string) error { _, err := os.ReadFile(at("p1/none")); return err }, unix.ENOENT, nil},
	{"read content", func(at func(string) string) error {
		b, err := os.ReadFile(at("r"))
		if err == nil && string(b) != "nameserver 127.0.0.1\n" {
			return errors.New("content " + string(b))
		}
		return err
	}, nil, nil},
	{"write content", func(at func(string) string) error { return os.WriteFile(at("r"), nil, 0o644) }, unix.EROFS, nil},
	{"remove at the root", func(at func(string) string) error { return os.Remove(at("p0")) }, unix.EROFS, nil},
	{"set an attribute", func(at func(string) string) error { return unix.Setxattr(at("p0"), "user.x", []byte("1"), 0) }, unix.EROFS,
		[]Refusal{{2, "/ws/.bashrc", OpChange}}},
	{"list the root", func(at func(string) string) error {
		es, err := os.ReadDir(at(""))
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		if err == nil && !slices.Equal(names, []string{"d0", "f0", "p0", "p1", "r"}) {
			return fmt.Errorf("lists %v", names)
		}
		return err
	}, nil, nil},
}

// clientEnv, when set, makes this test binary the client of
// TestStandIns (TestMain): a process of its own (a FUSE server and its client in one
// process can stall each other in Go's scheduler), in a mount namespace of
// its own, with the filesystem's detached mount as descriptor 3.
const clientEnv = "MASKFS_TEST_CLIENT"

// TestMain runs the client of TestStandIns when this binary is started
// as it (clientEnv), and the tests otherwise.
func TestMain(m *testing.M) {
	if os.Getenv(clientEnv) != "" {
		os.Exit(standInsClient())
	}
	os.Exit(m.Run())
}

// standInsClient is TestStandIns's client: it attaches the filesystem
// (descriptor 3) in its mount namespace, runs the steps and prints each
// one's errno.
func standInsClient() int {
	dir, err := os.MkdirTemp("", "maskfs-client-")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer os.Remove(dir)
	if err := unix.MoveMount(3, "", unix.AT_FDCWD, dir, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		fmt.Println(err)
		return 1
	}
	at := func(n string) string { return filepath.Join(dir, n) }
	for i, s := range standInSteps {
		err := s.run(at)
		var errno unix.Errno
		if !errors.As(err, &errno) && err != nil {
			fmt.Printf("STEP %d other %v\n", i, err)
			continue
		}
		fmt.Printf("STEP %d %d\n", i, errno)
	}
	_ = unix.Unmount(dir, unix.MNT_DETACH)
	return 0
}

// TestStandIns: through the kernel, a hidden node refuses every access
// with EACCES and a stand-in every change with EROFS, each refusal
// recorded with the covered path and what was tried; reading a stand-in
// gives its content, and questions (stat, access W_OK) are answered
// without a record.
func TestStandIns(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testutil.Need(t, false, "needs /dev/fuse: "+err.Error())
	}
	var rec recorder
	f := New(standInNodes, 0, 0, rec.record)
	mnt, err := f.Mount()
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	defer f.Close()
	mf := os.NewFile(uintptr(mnt), "mount")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), clientEnv+"=1")
	cmd.ExtraFiles = []*os.File{mf}
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	mf.Close()
	if err != nil {
		t.Fatalf("the client: %v\n%s", err, out)
	}
	got := map[int]string{}
	for _, l := range strings.Split(string(out), "\n") {
		var i int
		var res string
		if n, _ := fmt.Sscanf(l, "STEP %d %s", &i, &res); n == 2 {
			got[i] = strings.TrimPrefix(l, fmt.Sprintf("STEP %d ", i))
		}
	}
	var want []Refusal
	for i, s := range standInSteps {
		w := "0"
		if s.want != nil {
			w = fmt.Sprint(int(s.want.(unix.Errno)))
		}
		if got[i] != w {
			t.Errorf("%s: got %q, want errno %s (%v)", s.what, got[i], w, s.want)
		}
		want = append(want, s.rec...)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if !slices.Equal(rec.got, want) {
		t.Errorf("recorded\n%v\nwant\n%v", rec.got, want)
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
