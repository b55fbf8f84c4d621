package guest

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/yamux"
)

// InitCommand is the argument that makes hutch's binary the guest's init:
// the host puts "-- microvm-init" at the end of the kernel's command line,
// and the kernel passes what follows "--" to init as its arguments.
const InitCommand = "microvm-init"

// PortName is the name of the virtio-serial port that carries the agent's
// connection; the guest finds its device by that name.
const PortName = "hutch.agent"

// The guest's paths in the initramfs: the init binary, the directory of
// the kernel modules, and the file that gives their load order (one file
// name of ModuleDir a line).
const (
	InitPath    = "/init"
	ModuleDir   = "/modules"
	ModuleOrder = "/modules/order"
)

// The environment variables the kernel's command line gives the init when
// the host shares a root and a workspace over virtiofs: RootEnv is the
// virtiofs tag of the root (read-only, under a writable layer in memory),
// WorkspaceEnv the path at which the share tagged "workspace" is mounted
// in it, read-write, and where commands start.
const (
	RootEnv      = "HUTCH_ROOT"
	WorkspaceEnv = "HUTCH_WORKSPACE"
)

// RootBlock is RootEnv's value for a root that is no share but the EROFS
// filesystem of the guest's first virtio block device (an image's, built
// by image.Store.EROFS), read-only under the same writable layer; the
// workspace is then a directory of that layer, owned by WorkspaceOwnerEnv's
// "UID:GID" (root's when unset).
const (
	RootBlock         = "block:vda"
	WorkspaceOwnerEnv = "HUTCH_WORKSPACE_OWNER"
)

// The variables of the kernel's command line for a guest of hutch
// serve: LayerSizeEnv bounds the root's writable layer (its tmpfs, in the
// guest's memory) to that many bytes; LocalWorkspaceEnv ("1") makes the
// workspace, WorkspaceEnv's path, a directory of that layer rather than a
// share of the host's; SelfEnv ("1") binds the init's binary at SelfPath
// in every network mode (the daemon runs its port forwards' and code
// interpreter's helpers there).
const (
	LayerSizeEnv      = "HUTCH_LAYER_SIZE"
	LocalWorkspaceEnv = "HUTCH_WORKSPACE_LOCAL"
	SelfEnv           = "HUTCH_SELF"
)

// RelayMark starts each relay session the guest's init opens on the
// relay port. The port outlives a session: when its host end hangs up (a
// daemon saved the guest to disk, say) the guest's session ends, and a
// new one starts, mark first, once a host connects again; the host skips
// whatever precedes the mark (what the old session left in the port's
// queues), at most MaxRelaySkip bytes.
var RelayMark = []byte("\x00hutch-relay-session\x00")

// MaxRelaySkip bounds what the host skips before RelayMark.
const MaxRelaySkip = 1 << 20

// NetPortName is the virtio-serial port that carries the guest's relayed
// connections to hutch's egress proxy in network mode "proxy", and NetEnv
// the variable of the kernel's command line that tells the init to relay
// them (its value is NetPortName). In mode "none" the guest has neither.
const (
	NetPortName = "hutch.net"
	NetEnv      = "HUTCH_NET"
)

// DebugEnv, set to 1 on the kernel's command line (the host's
// microvm.Config.Debug), makes the guest's init log at debug level and
// watch the agent's port: every few seconds it logs what the port's driver
// received and sent beside what the agent read and wrote, and when the
// driver holds bytes the agent has not read for a while it logs the
// init's goroutines on the console.
const DebugEnv = "HUTCH_DEBUG"

// SelfPath is where the guest's commands find hutch's binary (the init's)
// in network mode "proxy": sandbox.SandboxHutch, which GIT_SSH_COMMAND
// names.
const SelfPath = "/dev/hutch"

// The first byte of each relayed stream names the proxy's service it is
// for.
const (
	StreamHTTP  byte = 'H'
	StreamSOCKS byte = 'S'
	StreamDNS   byte = 'D'
)

// MaxStreams bounds the relayed streams open at once: the guest opens no
// more, and the host refuses the ones beyond and ends the relay of a guest
// that keeps more open still.
const MaxStreams = 64

// StreamWindow is the receive window of a relayed stream, each side's
// bound on what one stream buffers.
const StreamWindow = 256 << 10

// MuxConfig is the configuration of the relay's multiplexing (yamux), the
// same on both sides: no keep-alive pings (the port ends with the VM, and
// the host takes a ping from the guest for a breach), a backlog and
// windows within the bounds above, and its log discarded.
func MuxConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	c.EnableKeepAlive = false
	c.AcceptBacklog = MaxStreams
	c.MaxStreamWindowSize = StreamWindow
	c.ConnectionWriteTimeout = 30 * time.Second
	c.StreamCloseTimeout = time.Minute
	c.LogOutput = io.Discard
	return c
}

// Boot is what the host sends on the agent's port when the guest's init
// asks for it (RequestBoot), before the agent's protocol starts: the environment the guest's commands start
// with and files written into the guest's root (its writable layer)
// before the agent serves. It carries what does not fit on the kernel's
// command line, which every process of the guest can read.
type Boot struct {
	// Env, when not nil, is the commands' environment (the init's own
	// otherwise), with a PATH added when it has none.
	Env []string `json:"env,omitempty"`
	// Files are written in order, each replacing what is at its path (a
	// symbolic link included), its directory made when missing.
	Files []File `json:"files,omitempty"`
	// Time is the host's clock as the message was sent (Unix time in
	// nanoseconds; WriteBoot sets it): the guest's clock is set to it,
	// finer than the second its emulated RTC gives.
	Time int64 `json:"time,omitempty"`
}

// File is a file of Boot.
type File struct {
	Path string      `json:"path"`
	Data []byte      `json:"data"`
	Mode os.FileMode `json:"mode"`
}

// MaxBoot bounds Boot's encoding: a trust bundle and an environment.
const MaxBoot = 16 << 20

// WriteBoot writes b, its Time the host's clock now, to w as ReadBoot
// reads it: its JSON's length (4 bytes, big-endian), then its JSON.
func WriteBoot(w io.Writer, b Boot) error {
	b.Time = time.Now().UnixNano()
	data, err := json.Marshal(b)
	if err != nil {
		return err
	}
	if len(data) > MaxBoot {
		return fmt.Errorf("the guest's boot message: %d bytes, more than %d", len(data), MaxBoot)
	}
	msg := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(data)), uint32(len(data)))
	_, err = w.Write(append(msg, data...))
	return err
}

// BootRequest is the byte the guest's init sends on the agent's port
// when it is ready for the boot message (RequestBoot).
const BootRequest byte = 'B'

// AnswerBoot, the host's side, waits for the guest's BootRequest on r and
// answers with b on w (WriteBoot).
func AnswerBoot(r io.Reader, w io.Writer, b Boot) error {
	var req [1]byte
	if _, err := io.ReadFull(r, req[:]); err != nil {
		return fmt.Errorf("the guest's request for its boot message: %w", err)
	}
	if req[0] != BootRequest {
		return fmt.Errorf("the guest's request for its boot message: byte %#x, want %#x", req[0], BootRequest)
	}
	return WriteBoot(w, b)
}

// RequestBoot, the guest's side, asks the host for the boot message on
// rw and reads it (ReadBoot).
func RequestBoot(rw io.ReadWriter) (Boot, error) {
	if _, err := rw.Write([]byte{BootRequest}); err != nil {
		return Boot{}, fmt.Errorf("ask the host for the boot message: %w", err)
	}
	return ReadBoot(rw)
}

// ReadBoot reads what WriteBoot wrote.
func ReadBoot(r io.Reader) (Boot, error) {
	var b Boot
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return b, fmt.Errorf("the host's boot message: %w", err)
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > MaxBoot {
		return b, fmt.Errorf("the host's boot message: %d bytes, more than %d", size, MaxBoot)
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(r, data); err != nil {
		return b, fmt.Errorf("the host's boot message: %w", err)
	}
	if err := json.Unmarshal(data, &b); err != nil {
		return b, fmt.Errorf("the host's boot message: %w", err)
	}
	for _, f := range b.Files {
		if !filepath.IsAbs(f.Path) {
			return b, errors.New("the host's boot message: a file's path is not absolute")
		}
	}
	return b, nil
}
