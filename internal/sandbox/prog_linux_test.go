package sandbox

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// The interpreter of the first process's prog runs here in the test
// process itself, on harmless system calls.

func TestProgSlotsAndClose(t *testing.T) {
	dir := t.TempDir()
	var p prog
	fd := p.slot()
	p.call("create", fd, unix.SYS_OPENAT, k(uintptr(unix.AT_FDCWD&0xffffffff)), p.str(filepath.Join(dir, "made")), k(unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC), k(0o600))
	data := []byte("hello")
	p.keep = append(p.keep, data)
	p.call("write", -1, unix.SYS_WRITE, s(fd), keepPtr(&p, &data[0]), ci(len(data)))
	p.close(fd)
	var slots [maxSlots]uintptr
	if i, e := run(p.ops, &slots); i >= 0 {
		t.Fatalf("op %d (%s) failed: %v", i, p.descs[i], e)
	}
	got, err := os.ReadFile(filepath.Join(dir, "made"))
	if err != nil || string(got) != "hello" {
		t.Fatalf("the prog wrote %q, %v; want hello", got, err)
	}
	if again := p.slot(); again != fd {
		t.Errorf("a closed slot is not reused: got %d, want %d", again, fd)
	}
}

func TestProgFailureAndSkip(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	tests := []struct {
		name     string
		skipOn   []unix.Errno
		wantFail int
		wantErr  unix.Errno
	}{
		{"an error stops the prog at its op", nil, 0, unix.ENOENT},
		{"an expected errno skips ahead", []unix.Errno{unix.ENOENT}, -1, 0},
		{"another errno still fails", []unix.Errno{unix.EACCES}, 0, unix.ENOENT},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p prog
			fd := p.slot()
			i := p.call("open missing", fd, unix.SYS_OPENAT, k(uintptr(unix.AT_FDCWD&0xffffffff)), p.str(missing), k(unix.O_RDONLY|unix.O_CLOEXEC), k(0))
			p.call("must be skipped", -1, unix.SYS_CLOSE, k(^uintptr(0)>>1)) // EBADF if reached
			if tt.skipOn != nil {
				p.skip(i, tt.skipOn...)
			}
			var slots [maxSlots]uintptr
			failed, errno := run(p.ops, &slots)
			if failed != tt.wantFail || errno != tt.wantErr {
				t.Errorf("run = op %d, %v; want op %d, %v", failed, errno, tt.wantFail, tt.wantErr)
			}
		})
	}
}

func TestProgPseudoOps(t *testing.T) {
	var p prog
	src, dst := int32(42), int32(0)
	v := p.slot()
	p.load(v, &src)
	p.expect("loaded", v, 42)
	j := p.jump()
	p.call("jumped over", -1, unix.SYS_CLOSE, k(^uintptr(0)>>1))
	p.land(j)
	p.store(&dst, v)
	p.expect("this fails", v, 7)
	var slots [maxSlots]uintptr
	failed, errno := run(p.ops, &slots)
	if dst != 42 {
		t.Errorf("store wrote %d, want 42", dst)
	}
	if failed != len(p.ops)-1 || errno != unix.EPIPE {
		t.Errorf("run = op %d, %v; want the last op with EPIPE", failed, errno)
	}
}

func TestCommandPaths(t *testing.T) {
	env := []string{"PATH=/a::/b"}
	if got := commandPaths("ls", env); len(got) != 3 || got[0] != "/a/ls" || got[1] != "ls" || got[2] != "/b/ls" {
		t.Errorf("commandPaths(ls) = %q", got)
	}
	if got := commandPaths("./x", env); len(got) != 1 || got[0] != "./x" {
		t.Errorf("commandPaths(./x) = %q", got)
	}
}
