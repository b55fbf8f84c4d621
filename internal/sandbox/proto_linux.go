package sandbox

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// The control channel between hutch and its init is a SOCK_SEQPACKET
// socketpair: one JSON message per packet, file descriptors beside it with
// SCM_RIGHTS. Everything init sends is untrusted by the parent (S7): packets
// are bounded and parsed into fixed structs.

// maxPacket bounds one control message.
const maxPacket = 1 << 20

// controlFD is the descriptor number of the control socket in init.
const controlFD = 3

// initConfig is everything init needs; sent once by the parent.
type initConfig struct {
	Args      []string  `json:"args"`
	Env       []string  `json:"env"`
	Dir       string    `json:"dir"`
	Root      string    `json:"root"`
	Writable  []bindSrc `json:"writable"`
	DenyRead  []string  `json:"deny_read"`
	AllowRead []string  `json:"allow_read"`
	DenyWrite []string  `json:"deny_write"`
	Pin       []string  `json:"pin"`
	TmpBytes  int64     `json:"tmp_bytes"`
	// PrivateHome, when set, gets a private tmpfs: the caller's home
	// directory that the sandbox's identity could not even enter.
	PrivateHome string `json:"private_home,omitempty"`
	Hostname    string `json:"hostname"`
	Tty         bool   `json:"tty"`
	Rows        uint16 `json:"rows,omitempty"`
	Cols        uint16 `json:"cols,omitempty"`
	BestEffort  bool   `json:"best_effort"`
	// Missing lists kernel features to act as if absent (tests only; see
	// SimulateMissingEnv).
	Missing map[string]bool `json:"missing,omitempty"`
	// Landlock is the index of a ruleset prepared by the parent among the
	// fds sent with the config, or -1 when init builds its own.
	Landlock int `json:"landlock"`
	// Rlimits are set on init before the command starts: the fallback when
	// no cgroup could be made.
	Rlimits []rlimit `json:"rlimits"`
}

// bindSrc is a writable host path. FD is the index of an already prepared
// (idmapped) detached mount among the fds sent with the config, or -1 when
// init clones the path itself.
type bindSrc struct {
	Path string `json:"path"`
	FD   int    `json:"fd"`
}

type rlimit struct {
	Resource int    `json:"resource"`
	Value    uint64 `json:"value"`
}

// initReply is what init tells the parent: once before starting the command
// (Started or Error) and nothing after; its exit code carries the command's.
// With a terminal, the pty's master comes with the Started reply.
type initReply struct {
	Started  bool     `json:"started"`
	Error    string   `json:"error,omitempty"`
	ExitCode int      `json:"exit_code,omitempty"`
	Dropped  []string `json:"dropped,omitempty"`
	Timings  []timing `json:"timings,omitempty"`
}

// timing is how long one step of the init's setup took, for --debug.
type timing struct {
	Phase string        `json:"phase"`
	Took  time.Duration `json:"took"`
}

func sendMsg(fd int, v any, fds []int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > maxPacket {
		return fmt.Errorf("control message of %d bytes exceeds %d", len(b), maxPacket)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	return unix.Sendmsg(fd, b, oob, nil, 0)
}

// recvMsg reads one packet into v and returns the descriptors that came with
// it. An empty packet (peer closed) is io.EOF-like: errPeerClosed.
func recvMsg(fd int, v any) ([]int, error) {
	oob := make([]byte, unix.CmsgSpace(64*4))
	for {
		// Peek at the packet's size first: most are small, and a buffer
		// of the maximum size would cost more to allocate than to read.
		size, _, _, _, err := unix.Recvmsg(fd, nil, nil, unix.MSG_PEEK|unix.MSG_TRUNC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if size > maxPacket {
			return nil, fmt.Errorf("control message of %d bytes exceeds %d", size, maxPacket)
		}
		buf := make([]byte, max(size, 1))
		n, oobn, flags, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		var fds []int
		if oobn > 0 {
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil {
				return nil, fmt.Errorf("parse control message: %w", err)
			}
			for _, m := range msgs {
				got, err := unix.ParseUnixRights(&m)
				if err == nil {
					fds = append(fds, got...)
				}
			}
		}
		if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
			closeAll(fds)
			return nil, fmt.Errorf("control message truncated")
		}
		if n == 0 {
			closeAll(fds)
			return nil, errPeerClosed
		}
		if err := json.Unmarshal(buf[:n], v); err != nil {
			closeAll(fds)
			return nil, fmt.Errorf("decode control message: %w", err)
		}
		return fds, nil
	}
}

var errPeerClosed = fmt.Errorf("control socket closed")

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

func socketPair() (parent, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("control socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "hutch-control"), os.NewFile(uintptr(fds[1]), "hutch-init-control"), nil
}
