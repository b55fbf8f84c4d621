package guest

import (
	"io"
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
