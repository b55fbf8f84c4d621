package oci

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil/ocitest"
)

// attackResults runs the escape suite's attacker with attacks in a
// container (docker run ARGS… IMAGE attacker ATTACKS) and returns each
// attack's result: its first word, and what follows it.
func attackResults(t *testing.T, d *ocitest.Docker, ctx context.Context, args []string, attacks ...string) map[string][2]string {
	t.Helper()
	r := d.Run(ctx, append(append(append([]string{"run", "--rm"}, args...), testImage, "attacker"), attacks...)...)
	got := map[string][2]string{}
	for _, l := range strings.Split(r.Stdout, "\n") {
		if k, v, ok := strings.Cut(l, " "); ok {
			word, more, _ := strings.Cut(v, " ")
			got[k] = [2]string{word, more}
		}
	}
	if len(got) != len(attacks) {
		t.Fatalf("the attacker ran %d of %d attacks: %s", len(got), len(attacks), r)
	}
	return got
}

// TestEscapeItemsInContainer runs the escape suite's items that concern a
// container's own boundary inside a container of hutch-runc started by
// Docker (its default seccomp profile and capabilities, a policy that
// allows one host): each must fail, and those plain runc lets through
// (run the same way, as the control) show the probe can succeed.
//
//	8  other processes: signal a host process, ptrace
//	10 privilege: namespaces, mount, keyctl, bpf, perf_event_open,
//	   userfaultfd, io_uring, kexec, modules, file handles
//	13 netlink, packet, vsock, raw sockets; the host's abstract unix
//	   sockets from a container on the host's network
//	15 direct egress around the proxy: TCP and UDP to the allowed
//	   host's address, UDP to a public resolver
//	16 DNS out: a lookup's UDP to the network
//	20 a leaked descriptor: nothing but 0, 1 and 2 is open
//	25 hutch-runc's own state is not in the container's view
func TestEscapeItemsInContainer(t *testing.T) {
	policies := t.TempDir()
	rt := ocitest.HutchRunc(t)
	d := ocitest.StartDocker(t, map[string]ocitest.Runtime{
		"hutch":      {Path: rt, Args: []string{"--hutch-policy-dir", policies, "--hutch-policy", "allowed"}},
		"hutch-host": {Path: rt, Args: []string{"--hutch-policy-dir", policies, "--hutch-policy", "host"}},
	})
	d.Load(t, imageTar(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	port := gatewayUpstream(t, ctx, d, policies)
	if err := os.WriteFile(filepath.Join(policies, "host.yaml"), []byte("network:\n  mode: host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tcp := fmt.Sprintf("tcp:%s:%d", dockerGateway, port)
	udp := fmt.Sprintf("udp:%s:%d", dockerGateway, port)
	want := map[string][]string{
		fmt.Sprintf("kill:%d", os.Getpid()): {"ESRCH"},
		"ptrace":                            {"EPERM"},
		"unshare:user":                      {"EPERM"}, "unshare:mnt": {"EPERM"}, "unshare:net": {"EPERM"},
		"clone_newuser": {"EPERM"}, "mount": {"EPERM"}, "keyctl": {"EPERM"}, "bpf": {"EPERM"},
		"perf_event_open": {"EPERM"}, "userfaultfd": {"EPERM"}, "io_uring_setup": {"EPERM"},
		"kexec_load": {"EPERM"}, "init_module": {"EPERM"}, "open_by_handle_at": {"EPERM"},
		"socket:netlink": {"ENOTSUP"}, "socket:packet": {"EPERM", "EAFNOSUPPORT"}, "socket:vsock": {"EAFNOSUPPORT"},
		"socket:raw4": {"EPERM"}, "socket:raw6": {"EPERM"},
		tcp: {"ECONNREFUSED"}, udp: {"EPERM", "ECONNREFUSED"}, "udp:8.8.8.8:53": {"EPERM", "ENETUNREACH", "ECONNREFUSED"},
		"open:/run/hutch-runc": {"ENOENT"},
	}
	var list []string
	for a := range want {
		list = append(list, a)
	}
	got := attackResults(t, d, ctx, []string{"--runtime", "hutch"}, append(list, "fds")...)
	for a, ok := range want {
		if !contains(ok, got[a][0]) {
			t.Errorf("%s in a container of hutch-runc: %s, want one of %v", a, got[a], ok)
		}
	}
	// Beyond 0, 1 and 2, only what the attacker's Go runtime opened
	// itself (its cgroup's CPU quota, its poller).
	for _, fd := range strings.Fields(got["fds"][1]) {
		n, target, _ := strings.Cut(fd, "=")
		if n != "0" && n != "1" && n != "2" && !strings.HasPrefix(target, "anon_inode:") && !strings.HasPrefix(target, "/sys/fs/cgroup/") {
			t.Errorf("a descriptor the container did not open: %s (all: %v)", fd, got["fds"])
		}
	}
	// The control: plain runc lets these through.
	control := attackResults(t, d, ctx, nil, tcp, "socket:netlink")
	for a, v := range control {
		if v[0] != "ok" {
			t.Errorf("%s under runc: %s, want ok (the probe cannot succeed)", a, v)
		}
	}

	// 13: an abstract unix socket of the host, from a container on the
	// host's network (a node policy of network.mode host): Landlock's
	// scope refuses it; runc's container reaches it.
	name := fmt.Sprintf("hutch-oci-%d", os.Getpid())
	al := d.Listen(t, "unix", "@"+name)
	go func() {
		for {
			c, err := al.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	abstract := "abstract:" + name
	if got := attackResults(t, d, ctx, []string{"--network", "host", "--runtime", "hutch-host"}, abstract); got[abstract][0] != "EPERM" {
		t.Errorf("%s from a container of hutch-runc: %v, want EPERM", abstract, got[abstract])
	}
	if got := attackResults(t, d, ctx, []string{"--network", "host"}, abstract); got[abstract][0] != "ok" {
		t.Errorf("%s from runc's container: %v, want ok (the probe cannot succeed)", abstract, got[abstract])
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}
