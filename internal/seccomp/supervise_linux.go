package seccomp

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// notif is struct seccomp_notif: one call handed to the supervisor.
type notif struct {
	id    uint64
	pid   uint32 // the calling thread, in the supervisor's pid namespace
	flags uint32
	data  struct {
		nr   int32
		arch uint32
		ip   uint64
		args [6]uint64
	}
}

// notifResp is struct seccomp_notif_resp: the call's result.
type notifResp struct {
	id    uint64
	val   int64
	error int32 // a negative errno, or 0 for val
	flags uint32
}

// unknownUmask is the answer when a thread's umask cannot be read (it is
// gone, and the answer is dropped anyway): a caller that sets it back
// makes files private, never more open.
const unknownUmask = 0o077

// Supervisor answers the calls a filter with [Notify] rules hands over.
// The only such rule is umask's (see hostWriteRules): a umask that lacks
// the withheld bits is never set; the call returns the calling thread's
// current umask, read from /proc, as umask(2) returns the old one. So the
// usual way to read the umask, old = umask(0); umask(old), reads the true
// umask and changes nothing, and no file is ever created writable to
// others. Any other call is answered ENOSYS.
//
// It runs on the Go runtime's poller, in the agent, PID 1 of a served
// sandbox (hutch run's first process, which has no Go runtime, does the
// same in package sandbox): the sandbox's own PID 1 answers its calls, at
// no cost to hutch, and a sandbox that keeps asking spends its own time.
// When the supervisor is closed (or PID 1 ends, and with it the sandbox),
// the calls fail with ENOSYS.
type Supervisor struct {
	f    *os.File
	done chan struct{}
}

// Supervise starts answering the notifications of the listener fd, which
// it takes over (see [Install]) and marks close-on-exec: nothing the
// process starts gets it. Close stops it.
func Supervise(fd int) (*Supervisor, error) {
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("seccomp: supervise: %w", err)
	}
	s := &Supervisor{f: os.NewFile(uintptr(fd), "seccomp-listener"), done: make(chan struct{})}
	rc, err := s.f.SyscallConn()
	if err != nil {
		s.f.Close()
		return nil, fmt.Errorf("seccomp: supervise: %w", err)
	}
	go s.serve(rc)
	return s, nil
}

// Close stops answering and closes the listener; calls waiting for an
// answer, and later ones, fail with ENOSYS.
func (s *Supervisor) Close() error {
	err := s.f.Close()
	<-s.done
	return err
}

// serve answers notifications until the listener is closed or the filter
// has no user left. The poller is edge-triggered: each wake-up answers
// every pending call before waiting again.
func (s *Supervisor) serve(rc interface {
	Read(func(fd uintptr) bool) error
}) {
	defer close(s.done)
	for {
		hup := false
		err := rc.Read(func(fd uintptr) bool {
			for {
				pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
				_, err := unix.Poll(pfd, 0)
				switch {
				case err == unix.EINTR:
					continue
				case err != nil:
					return false
				case pfd[0].Revents&unix.POLLIN != 0:
					// A pending call: the receive cannot block
					// (it fails with ENOENT if the caller went
					// away meanwhile).
					answer(int(fd))
					continue
				case pfd[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0:
					hup = true
					return true
				}
				return false
			}
		})
		if err != nil || hup {
			return
		}
	}
}

// answer receives one call and answers it.
func answer(fd int) {
	var n notif
	if err := ioctl(fd, unix.SECCOMP_IOCTL_NOTIF_RECV, unsafe.Pointer(&n)); err != nil {
		return
	}
	resp := notifResp{id: n.id}
	if native == nil || n.data.arch != native.audit || !native.is(int(n.data.nr), "umask") {
		resp.error = -int32(unix.ENOSYS)
	} else {
		mask, err := threadUmask(n.pid)
		if err != nil {
			mask = unknownUmask
		}
		// The thread's pid may have been reused if the call is gone:
		// answer only for a call still waiting, whose thread was the
		// one read.
		if ioctl(fd, unix.SECCOMP_IOCTL_NOTIF_ID_VALID, unsafe.Pointer(&n.id)) != nil {
			return
		}
		resp.val = int64(mask)
	}
	_ = ioctl(fd, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&resp)) // ENOENT: the caller went away
}

func ioctl(fd int, req uint, arg unsafe.Pointer) error {
	for {
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg))
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return errno
		}
		return nil
	}
}

// threadUmask reads the umask of thread tid from /proc.
func threadUmask(tid uint32) (uint32, error) {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(tid), 10) + "/status")
	if err != nil {
		return 0, err
	}
	i := bytes.Index(b, []byte("\nUmask:"))
	if i < 0 {
		return 0, errors.New("no Umask in /proc status")
	}
	line := b[i+len("\nUmask:"):]
	if j := bytes.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	v, err := strconv.ParseUint(string(bytes.TrimSpace(line)), 8, 32)
	if err != nil {
		return 0, fmt.Errorf("umask in /proc status: %w", err)
	}
	return uint32(v) & 0o777, nil
}
