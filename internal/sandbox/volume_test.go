package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckVolumes: what a volume's host directory and path may be, each
// refusal naming the volume and the problem.
func TestCheckVolumes(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ws := "/home/user/project"
	ok := [][]Volume{
		nil,
		{{Dir: dir, At: "/data"}},
		{{Dir: dir, At: "/data/a"}, {Dir: dir, At: "/data/b"}, {Dir: dir, At: "/home/user/other"}},
		{{Dir: dir, At: "/etc/app"}, {Dir: dir, At: "/var/lib/app"}, {Dir: dir, At: "/tmp/cache"}, {Dir: dir, At: "/devices"}},
	}
	for _, vols := range ok {
		if err := CheckVolumes(vols, ws); err != nil {
			t.Errorf("%v: %v", vols, err)
		}
	}
	many := make([]Volume, MaxVolumes+1)
	for i := range many {
		many[i] = Volume{Dir: dir, At: fmt.Sprintf("/v%d", i)}
	}
	for _, c := range []struct {
		vols []Volume
		want string
	}{
		{[]Volume{{Dir: "", At: "/data"}}, "volume 0: no host directory"},
		{[]Volume{{Dir: "rel", At: "/data"}}, `volume 0: host directory "rel": not an absolute, clean path`},
		{[]Volume{{Dir: dir + "/", At: "/data"}}, "not an absolute, clean path"},
		{[]Volume{{Dir: dir + "/x/..", At: "/data"}}, "not an absolute, clean path"},
		{[]Volume{{Dir: dir + "/missing", At: "/data"}}, "no such file or directory"},
		{[]Volume{{Dir: file, At: "/data"}}, "not a directory"},
		{[]Volume{{Dir: dir, At: ""}}, "no path to show it at"},
		{[]Volume{{Dir: dir, At: "/"}}, "at /: a system directory"},
		{[]Volume{{Dir: dir, At: "/usr"}}, "a system directory"},
		{[]Volume{{Dir: dir, At: "data"}}, "not an absolute, clean path"},
		{[]Volume{{Dir: dir, At: "/data/"}}, "not an absolute, clean path"},
		{[]Volume{{Dir: dir, At: "/data//x"}}, "not an absolute, clean path"},
		{[]Volume{{Dir: dir, At: "/proc/1"}}, "under /proc, /sys or /dev"},
		{[]Volume{{Dir: dir, At: "/sys/kernel"}}, "under /proc, /sys or /dev"},
		{[]Volume{{Dir: dir, At: "/dev/shm"}}, "under /proc, /sys or /dev"},
		{[]Volume{{Dir: dir, At: ws}}, "the sandbox's workspace"},
		{[]Volume{{Dir: dir, At: ws + "/data"}}, "inside the sandbox's workspace"},
		{[]Volume{{Dir: dir, At: "/home"}}, "holds the sandbox's workspace"},
		{[]Volume{{Dir: dir, At: "/a"}, {Dir: dir, At: "/a"}}, "volume 1: at /a: volume 0 is there already"},
		{[]Volume{{Dir: dir, At: "/a"}, {Dir: dir, At: "/a/b"}}, "volume 1: at /a/b: inside volume 0 at /a"},
		{[]Volume{{Dir: dir, At: "/a/b"}, {Dir: dir, At: "/a"}}, "volume 1: at /a: holds volume 0 at /a/b"},
		{many, fmt.Sprintf("%d volumes, at most %d allowed", MaxVolumes+1, MaxVolumes)},
	} {
		err := CheckVolumes(c.vols, ws)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.120v: %v, want %q", c.vols, err, c.want)
		}
	}
}
