package ocitest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// Containerd is a containerd of the test's own.
type Containerd struct {
	*daemon
	// Socket is its gRPC socket, for ctr --address.
	Socket string
	// Namespace is the containerd namespace the test's containers are
	// in: the runc shim keeps their runtime state under
	// /run/containerd/runc/NAMESPACE, which Stop removes.
	Namespace string
}

// StartContainerd starts containerd (Debian's) with its root, state and
// sockets in a new temporary directory, the CRI plugin off, env added to
// its environment (which its shims and runtimes inherit); the test's end
// kills every task it still has and ends it.
func StartContainerd(t testing.TB, env ...string) *Containerd {
	t.Helper()
	Need(t, "containerd", "containerd:ctr", "containerd:containerd-shim-runc-v2", "runc")
	dir, err := os.MkdirTemp("", "hutch-containerd-")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "containerd.sock")
	config := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[debug]
  level = "info"
[metrics]
  address = ""
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, sock+".ttrpc")
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &Containerd{Socket: sock, Namespace: "hutch-test-" + filepath.Base(dir)[len("hutch-containerd-"):]}
	c.daemon = start(t, "containerd", dir, env, "--config", filepath.Join(dir, "config.toml"))
	t.Cleanup(func() {
		c.Stop(t)
		if t.Failed() {
			t.Logf("containerd's log:\n%s", c.log.String())
		}
		removeDir(t, dir)
	})
	c.waitSocket(t, sock)
	return c
}

// Stop kills the tasks left, ends containerd and everything it started,
// and removes the runtime state of its namespace.
func (c *Containerd) Stop(t testing.TB) {
	select {
	case <-c.done:
		// It ended on its own: what it started may be left.
	default:
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if r := c.Ctr(ctx, "tasks", "ls", "-q"); r.Err == nil {
			for _, id := range strings.Fields(r.Stdout) {
				c.Ctr(ctx, "tasks", "kill", "-a", "-s", "SIGKILL", id)
				c.Ctr(ctx, "tasks", "delete", "-f", id)
			}
		}
		if r := c.Ctr(ctx, "containers", "ls", "-q"); r.Err == nil {
			for _, id := range strings.Fields(r.Stdout) {
				c.Ctr(ctx, "containers", "delete", id)
			}
		}
	}
	c.stop(t)
	// runsc (the gVisor tier) binds a network namespace into its root
	// there, which outlives its containers.
	if err := testutil.RemoveMounted(filepath.Join("/run/containerd/runc", c.Namespace)); err != nil {
		t.Errorf("containerd's runtime state: %v", err)
	}
}

// Kill kills containerd and its shims, as an engine that is lost: their
// containers go on, with no one to delete them; Stop ends them.
func (c *Containerd) Kill() {
	c.cmd.Process.Kill()
	<-c.done
	for _, pid := range processesNaming(c.dir) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// Ctr runs ctr on this containerd, in the test's namespace.
func (c *Containerd) Ctr(ctx context.Context, args ...string) Result {
	return run(ctx, nil, "", "ctr", append([]string{"--address", c.Socket, "--namespace", c.Namespace}, args...)...)
}

// Import imports a `docker save` tarball.
func (c *Containerd) Import(t testing.TB, tar string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if r := c.Ctr(ctx, "images", "import", "--no-unpack=false", tar); r.Err != nil {
		t.Fatalf("ctr images import %s: %s", tar, r)
	}
}

// removeDir removes an engine's directory once it ended. A container's
// root below it may stay a mount point for a while in the copies of the
// host's mounts that other tests' sandboxes hold (rmdir is EBUSY then):
// it is tried again for a minute before it is reported left.
func removeDir(t testing.TB, dir string) {
	var err error
	if !testutil.Eventually(time.Minute, func() bool { err = os.RemoveAll(dir); return err == nil }) {
		t.Logf("%s left behind: %v", dir, err)
	}
}
