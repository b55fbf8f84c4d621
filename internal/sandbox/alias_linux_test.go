package sandbox

import (
	"slices"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/mountinfo"
)

func TestAliases(t *testing.T) {
	mounts := []mountinfo.Mount{
		{Dev: "8:1", Root: "/", Point: "/"},
		{Dev: "8:2", Root: "/", Point: "/home"},
		{Dev: "0:5", Root: "/", Point: "/proc"},
		{Dev: "8:2", Root: "/u", Point: "/mnt/u"},                             // the home u, elsewhere
		{Dev: "8:2", Root: "/", Point: "/srv/homes"},                          // all homes
		{Dev: "8:2", Root: "/u/.ssh/keys", Point: "/keys"},                    // inside a denied directory
		{Dev: "8:2", Root: "/u/.sshx", Point: "/not-ssh"},                     // a sibling whose name shares a prefix
		{Dev: "8:1", Root: "/", Point: "/var/tmp/root"},                       // the root filesystem again
		{Dev: "8:1", Root: "/etc", Point: "/srv/etc"},                         // holds no denied path
		{Dev: "8:2", Root: "/other", Point: "/home/u/.ssh/sub"},               // over a part of the denied tree
		{Dev: "8:1", Root: "/", Point: "/run/hutch-gvisor/hutch-0123/rootfs"}, // a gVisor sandbox's root
		{Dev: "8:1", Root: "/", Point: "/run/hutch-gvisor-test-01/hutch-0123/rootfs"},
		{Dev: "8:2", Root: "/", Point: "/home/u/.ssh/all"}, // inside a denied path
	}
	got := aliases([]string{"/home/u/.ssh", "/etc/shadow", "/home/u/.aws/credentials"}, mounts)
	want := []string{
		"/mnt/u/.ssh", "/srv/homes/u/.ssh", "/keys",
		"/var/tmp/root/etc/shadow", "/srv/etc/shadow",
		"/mnt/u/.aws/credentials", "/srv/homes/u/.aws/credentials",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("aliases = %q\nwant %q", got, want)
	}
	// The last mount at a point is the one that shows there.
	stacked := []mountinfo.Mount{
		{Dev: "8:1", Root: "/", Point: "/"},
		{Dev: "8:1", Root: "/data", Point: "/srv"},
		{Dev: "0:9", Root: "/", Point: "/srv"}, // a tmpfs over it
		{Dev: "0:9", Root: "/s", Point: "/mnt/s"},
	}
	if got := aliases([]string{"/srv/s/key"}, stacked); !slices.Equal(got, []string{"/mnt/s/key"}) {
		t.Errorf("aliases under a stacked mount = %q, want [/mnt/s/key]", got)
	}
	for p, want := range map[string]bool{"/run/hutch-gvisor": true, "/run/hutch-gvisor/x": true, "/run/hutch-gvisor-test-1/x": true, "/run/hutch-gvisorx": false, "/run/hutch": false} {
		if transient(p) != want {
			t.Errorf("transient(%s) = %v, want %v", p, !want, want)
		}
	}
	if !shared(mounts) || shared([]mountinfo.Mount{{Dev: "8:1", Point: "/"}, {Dev: "0:5", Point: "/proc"}, {Dev: "8:1", Point: "/run/hutch-gvisor/x/rootfs"}}) {
		t.Error("shared: a filesystem mounted twice outside the state directories is shared, one mounted once is not")
	}
	if got := aliases([]string{"/home/u/.ssh"}, nil); len(got) != 0 {
		t.Errorf("aliases without mounts = %q", got)
	}
}
