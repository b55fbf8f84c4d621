package guest

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
