package ocitest

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Docker is a dockerd of the test's own, in a network namespace of its
// own (its bridge and firewall rules go with it), with runtimes
// registered by name.
type Docker struct {
	*daemon
	// Host is its API address, for docker -H.
	Host string
}

// Runtime is an OCI runtime registered with dockerd: its binary and the
// arguments dockerd gives it before the command (daemon.json's
// runtimeArgs).
type Runtime struct {
	Path string   `json:"path"`
	Args []string `json:"runtimeArgs,omitempty"`
}

// StartDocker starts dockerd (Debian's docker.io) with its data root,
// exec root (and the containerd it starts) in a new temporary directory,
// in a new network namespace, with runtimes added by name; the test's end
// removes its containers and ends it.
func StartDocker(t testing.TB, runtimes map[string]Runtime) *Docker {
	t.Helper()
	Need(t, "docker.io:dockerd", "docker.io:docker", "util-linux:unshare", "iproute2:ip", "containerd", "runc")
	dir, err := os.MkdirTemp("", "hutch-docker-")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "docker.sock")
	// Its network namespace's loopback up: traffic to its own addresses
	// (the bridge's, where tests listen) goes through it.
	args := []string{"--net", "--", "sh", "-c", `ip link set lo up && exec "$0" "$@"`, "dockerd",
		"--data-root", filepath.Join(dir, "root"), "--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "dockerd.pid"), "-H", "unix://" + sock,
		"--config-file", filepath.Join(dir, "daemon.json"),
		"--userland-proxy=false", "--log-level", "warn"}
	config, err := json.Marshal(map[string]any{"runtimes": runtimes})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "daemon.json"), config, 0o600); err != nil {
		t.Fatal(err)
	}
	d := &Docker{Host: "unix://" + sock}
	d.daemon = start(t, "unshare", dir, nil, args...)
	t.Cleanup(func() {
		d.Stop(t)
		if t.Failed() {
			t.Logf("dockerd's log:\n%s", d.log.String())
		}
		removeDir(t, dir)
	})
	d.waitSocket(t, sock)
	return d
}

// Stop removes every container, ends dockerd (which ends its
// containerd) and everything they started.
func (d *Docker) Stop(t testing.TB) {
	select {
	case <-d.done:
		// It ended on its own: what it started may be left.
	default:
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if r := d.Run(ctx, "ps", "-aq"); r.Err == nil && strings.TrimSpace(r.Stdout) != "" {
			d.Run(ctx, append([]string{"rm", "-f"}, strings.Fields(r.Stdout)...)...)
		}
	}
	d.stop(t)
}

// Run runs the docker client on this dockerd.
func (d *Docker) Run(ctx context.Context, args ...string) Result {
	return run(ctx, []string{"DOCKER_HOST=" + d.Host, "DOCKER_CONFIG=" + filepath.Join(d.dir, "client")}, "", "docker", args...)
}

// Load loads a `docker save` tarball.
func (d *Docker) Load(t testing.TB, tar string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if r := d.Run(ctx, "load", "-i", tar); r.Err != nil {
		t.Fatalf("docker load %s: %s", tar, r)
	}
}

// Pid is dockerd's pid, whose network namespace its containers' bridge
// is in.
func (d *Docker) Pid() int { return d.cmd.Process.Pid }

// Listen makes a listener of network at addr in dockerd's network
// namespace (the side of its bridge where the containers' traffic goes
// out; the host's network for a container of --network host), served by
// the test; it is closed at the test's end.
func (d *Docker) Listen(t testing.TB, network, addr string) net.Listener {
	t.Helper()
	l, err := ListenIn(d.Pid(), network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// DataRoot is dockerd's --data-root (its images' and containers' layers).
func (d *Docker) DataRoot() string { return filepath.Join(d.dir, "root") }

// Dir is dockerd's directory (its data and exec roots are in it: the
// runtimes' state of its containers too).
func (d *Docker) Dir() string { return d.dir }
