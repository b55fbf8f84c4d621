package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/image/fetch"
	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// volumeDir is a fresh host directory for a volume (root's, mode 0755,
// outside /tmp, which sandboxes replace), removed when the test ends.
func volumeDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "hutch-volume-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// owner is the uid:gid of the host file p.
func owner(t *testing.T, p string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d:%d", st.Uid, st.Gid)
}

// readHost is the content of the host file p, "" if it cannot be read.
func readHost(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// TestVolumes: a sandbox shows the host directories it is given
// read-write at their paths, in both tiers: what it writes is in the
// host's directory with the ids it has inside (host ids as themselves),
// what the host writes it sees; two sandboxes given one directory see
// each other's writes; Get and List answer the volumes; pausing (in
// memory, or to disk) and resuming (with the memory, or a cold boot
// without it) keeps them, as does a daemon restart with the sandbox
// paused to disk.
func TestVolumes(t *testing.T) {
	bothTiers(t, func(t *testing.T, m *Manager, tier string) {
		ctx := longCtx(t)
		data, deep := volumeDir(t), volumeDir(t)
		if err := os.WriteFile(filepath.Join(data, "from-host"), []byte("host\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(filepath.Join(data, "from-host"), 1234, 2345); err != nil {
			t.Fatal(err)
		}
		cache := volumeDir(t)
		vols := []Volume{{Name: "data", Dir: data, At: "/data"}, {Name: "deep", Dir: deep, At: "/mnt/hutch/deep"}, {Name: "cache", Dir: cache, At: "/tmp/cache"}}
		info := mustCreate(t, m, "a", CreateRequest{Volumes: vols})
		if !slices.Equal(info.Volumes, vols) {
			t.Errorf("create answers volumes %+v, want %+v", info.Volumes, vols)
		}
		if got, err := m.Get(ctx, "a", info.ID); err != nil || !slices.Equal(got.Volumes, vols) {
			t.Errorf("get: volumes %+v, %v", got.Volumes, err)
		}
		if list, err := m.List(ctx, "a", nil, ""); err != nil || len(list) != 1 || !slices.Equal(list[0].Volumes, vols) {
			t.Errorf("list: %+v, %v", list, err)
		}

		out := mustRun(t, m, "a", info.ID, `cat /data/from-host; stat -c %u:%g /data/from-host; `+
			`echo sandbox >/data/from-sandbox; echo user >/data/as-user; chown 1000:1001 /data/as-user; `+
			`mkdir /data/sub && echo deep >/mnt/hutch/deep/file; echo cached >/tmp/cache/file; echo ok`)
		if out != "host\n1234:2345\nok\n" {
			t.Errorf("in the sandbox:\n%s", out)
		}
		for p, want := range map[string]string{"from-sandbox": "sandbox\n", "as-user": "user\n"} {
			if got := readHost(filepath.Join(data, p)); got != want {
				t.Errorf("host's %s: %q, want %q", p, got, want)
			}
		}
		if got := owner(t, filepath.Join(data, "from-sandbox")); got != "0:0" {
			t.Errorf("a file the sandbox's root wrote is %s's on the host, want 0:0", got)
		}
		if got := owner(t, filepath.Join(data, "as-user")); got != "1000:1001" {
			t.Errorf("a file the sandbox gave to 1000:1001 is %s's on the host", got)
		}
		if got := readHost(filepath.Join(cache, "file")); got != "cached\n" {
			t.Errorf("the volume in the sandbox's /tmp: the host's file: %q", got)
		}
		if got := readHost(filepath.Join(deep, "file")); got != "deep\n" {
			t.Errorf("the second volume's file on the host: %q", got)
		}
		if tier == policy.TierNamespace {
			// The mount's attributes (gVisor's kernel shows its own).
			out := mustRun(t, m, "a", info.ID, `grep ' /data ' /proc/self/mountinfo`)
			if !strings.Contains(out, "nosuid") || !strings.Contains(out, "nodev") || !strings.Contains(out, " rw,") {
				t.Errorf("the volume's mount: %s", out)
			}
		}

		// Another sandbox given the same directory, elsewhere.
		other := mustCreate(t, m, "a", CreateRequest{Volumes: []Volume{{Name: "data", Dir: data, At: "/shared"}}})
		if out := mustRun(t, m, "a", other.ID, `cat /shared/from-sandbox; echo other >/shared/from-other; test -e /data || echo no-data`); out != "sandbox\nno-data\n" {
			t.Errorf("the second sandbox:\n%s", out)
		}
		if out := mustRun(t, m, "a", info.ID, `cat /data/from-other`); out != "other\n" {
			t.Errorf("the first sandbox reads the second's file: %q", out)
		}

		step := func(what string, pause func() error, resume func() error) {
			t.Helper()
			if err := pause(); err != nil {
				t.Fatalf("%s: pause: %v", what, err)
			}
			if err := os.WriteFile(filepath.Join(data, "while-paused"), []byte(what+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := resume(); err != nil {
				t.Fatalf("%s: resume: %v", what, err)
			}
			out := mustRun(t, m, "a", info.ID, `cat /data/from-sandbox /data/while-paused /mnt/hutch/deep/file /tmp/cache/file; echo `+what+` >/data/after`)
			if want := "sandbox\n" + what + "\ndeep\ncached\n"; out != want {
				t.Errorf("%s: after resume:\n%s\nwant:\n%s", what, out, want)
			}
			if got := readHost(filepath.Join(data, "after")); got != what+"\n" {
				t.Errorf("%s: the host's file written after resume: %q", what, got)
			}
		}
		pause := func(o PauseOptions) func() error {
			return func() error { _, err := m.PauseWith(ctx, "a", info.ID, o); return err }
		}
		resume := func(o ResumeOptions) func() error {
			return func() error { _, err := m.ResumeWith(ctx, "a", info.ID, o); return err }
		}
		step("paused", pause(PauseOptions{}), resume(ResumeOptions{}))
		step("files-only", pause(PauseOptions{FilesOnly: true}), resume(ResumeOptions{}))
		step("rebooted", pause(PauseOptions{}), resume(ResumeOptions{Reboot: true}))
		// A snapshot carries neither the volume nor its content; a
		// sandbox made from it gets what its own request names.
		sn, err := m.Snapshot(ctx, "a", info.ID)
		if err != nil {
			t.Fatal(err)
		}
		if sn.Memory {
			t.Errorf("a snapshot of a sandbox with volumes kept its memory")
		}
		bare := mustCreate(t, m, "a", CreateRequest{Snapshot: sn.ID})
		if len(bare.Volumes) != 0 {
			t.Errorf("a sandbox from the snapshot answers volumes %+v", bare.Volumes)
		}
		if out := mustRun(t, m, "a", bare.ID, `ls -A /data | wc -l; echo x >/data/local; cat /data/local`); out != "0\nx\n" {
			t.Errorf("a sandbox from the snapshot without volumes:\n%s", out)
		}
		if _, err := os.Stat(filepath.Join(data, "local")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the copy's write reached the volume: %v", err)
		}
		again := mustCreate(t, m, "a", CreateRequest{Snapshot: sn.ID, Volumes: []Volume{{Name: "data", Dir: data, At: "/again"}}})
		if out := mustRun(t, m, "a", again.ID, `cat /again/from-sandbox`); out != "sandbox\n" {
			t.Errorf("a sandbox from the snapshot with the volume: %q", out)
		}
		// A snapshot of a sandbox without volumes (with its memory,
		// under gVisor): a sandbox from it given a volume has it.
		plain := mustCreate(t, m, "a", CreateRequest{})
		mustRun(t, m, "a", plain.ID, `echo plain >/etc/plain-file`)
		psn, err := m.Snapshot(ctx, "a", plain.ID)
		if err != nil {
			t.Fatal(err)
		}
		if psn.Memory != (tier == policy.TierGVisor) {
			t.Errorf("a snapshot of a sandbox without volumes: memory %v", psn.Memory)
		}
		fork := mustCreate(t, m, "a", CreateRequest{Snapshot: psn.ID, Volumes: []Volume{{Name: "data", Dir: data, At: "/forked"}}})
		if out := mustRun(t, m, "a", fork.ID, `cat /etc/plain-file /forked/from-sandbox`); out != "plain\nsandbox\n" {
			t.Errorf("a sandbox given a volume, from a snapshot without: %q", out)
		}
		for _, id := range []string{bare.ID, again.ID, other.ID, plain.ID, fork.ID} {
			if err := m.Destroy(ctx, "a", id); err != nil {
				t.Fatal(err)
			}
		}

		if tier == policy.TierGVisor {
			// Paused to disk, across a restart of the daemon.
			cfg := m.cfg
			if _, err := m.Pause(ctx, "a", info.ID); err != nil {
				t.Fatal(err)
			}
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
			m = newManager(t, cfg)
			if got, err := m.Get(ctx, "a", info.ID); err != nil || got.State != store.StatePaused || !slices.Equal(got.Volumes, vols) {
				t.Fatalf("the next daemon's record: %+v, %v", got, err)
			}
			if _, err := m.Resume(ctx, "a", info.ID); err != nil {
				t.Fatal(err)
			}
			if out := mustRun(t, m, "a", info.ID, `cat /data/after; echo restarted >/data/after`); out != "rebooted\n" {
				t.Errorf("after the daemon's restart: %q", out)
			}
			if got := readHost(filepath.Join(data, "after")); got != "restarted\n" {
				t.Errorf("after the daemon's restart, the host's file: %q", got)
			}
		}
	})
}

// TestVolumesInvalid: a create with bad volumes is refused as the
// tenant's error, naming the volume and the problem, and starts nothing.
func TestVolumesInvalid(t *testing.T) {
	m := newManager(t, Config{})
	ctx := testCtx(t)
	dir := volumeDir(t)
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	many := make([]Volume, MaxVolumes+1)
	for i := range many {
		many[i] = Volume{Name: fmt.Sprint(i), Dir: dir, At: fmt.Sprintf("/v%d", i)}
	}
	for _, c := range []struct {
		vols []Volume
		want string
	}{
		{[]Volume{{Name: "", Dir: dir, At: "/data"}}, "volumes[0]: no name"},
		{[]Volume{{Name: strings.Repeat("n", MaxVolumeName+1), Dir: dir, At: "/data"}}, "is longer than"},
		{[]Volume{{Name: "a\x00b", Dir: dir, At: "/data"}}, "not printable"},
		{[]Volume{{Name: "rel", Dir: "var/tmp", At: "/data"}}, `volumes[0] ("rel"): host directory "var/tmp": not an absolute, clean path`},
		{[]Volume{{Name: "unclean", Dir: dir + "/../" + filepath.Base(dir), At: "/data"}}, "not an absolute, clean path"},
		{[]Volume{{Name: "missing", Dir: dir + "/missing", At: "/data"}}, "no such file or directory"},
		{[]Volume{{Name: "file", Dir: file, At: "/data"}}, "not a directory"},
		{[]Volume{{Name: "root", Dir: dir, At: "/"}}, `volumes[0] ("root"): at /: a system directory`},
		{[]Volume{{Name: "etc", Dir: dir, At: "/etc"}}, "a system directory"},
		{[]Volume{{Name: "rel", Dir: dir, At: "data"}}, "not an absolute, clean path"},
		{[]Volume{{Name: "dots", Dir: dir, At: "/data/../etc"}}, "not an absolute, clean path"},
		{[]Volume{{Name: "proc", Dir: dir, At: "/proc/sys"}}, "under /proc, /sys or /dev"},
		{[]Volume{{Name: "sys", Dir: dir, At: "/sys/fs"}}, "under /proc, /sys or /dev"},
		{[]Volume{{Name: "dev", Dir: dir, At: "/dev/hutch"}}, "under /proc, /sys or /dev"},
		{[]Volume{{Name: "ws", Dir: dir, At: DefaultWorkspace}}, "the sandbox's workspace"},
		{[]Volume{{Name: "in-ws", Dir: dir, At: DefaultWorkspace + "/v"}}, "inside the sandbox's workspace"},
		{[]Volume{{Name: "over-ws", Dir: dir, At: "/home/user"}}, "holds the sandbox's workspace /home/user/project"},
		{[]Volume{{Name: "a", Dir: dir, At: "/data"}, {Name: "b", Dir: dir, At: "/data"}}, `volumes[1] ("b"): at /data: volume 0 is there already`},
		{[]Volume{{Name: "a", Dir: dir, At: "/data"}, {Name: "b", Dir: dir, At: "/data/b"}}, "inside volume 0 at /data"},
		{[]Volume{{Name: "a", Dir: dir, At: "/data/a"}, {Name: "b", Dir: dir, At: "/data"}}, "holds volume 0 at /data/a"},
		{many, fmt.Sprintf("%d volumes, at most %d allowed", MaxVolumes+1, MaxVolumes)},
	} {
		r := CreateRequest{Volumes: c.vols}
		if strings.Contains(c.want, "/home/user/project") {
			r.Policy.Filesystem.Workspace = "/home/user/project"
		}
		_, err := m.Create(ctx, "a", r)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("volumes %.200v: %v, want invalid: %q", c.vols, err, c.want)
		}
	}
	if list, err := m.List(ctx, "a", nil, ""); err != nil || len(list) != 0 {
		t.Errorf("refused creates left sandboxes: %+v, %v", list, err)
	}
}

// TestVolumesSymlink: a volume's path is never resolved through a
// symbolic link of the sandbox's root — the host's root (/var/run ->
// /run) or an image's (/mnt -> /etc, /data -> ../../..): the sandbox is
// refused, saying so, and nothing is made where the link points, in the
// view or on the host. Both tiers.
func TestVolumesSymlink(t *testing.T) {
	for _, tier := range []string{policy.TierNamespace, policy.TierGVisor} {
		t.Run(tier, func(t *testing.T) {
			cfg := Config{AgentBinary: filepath.Join(filepath.Dir(testutil.Hutch(t)), "hutch-agent")}
			if tier == policy.TierGVisor {
				cfg = gvisorConfig(t)
				cfg.AgentBinary = filepath.Join(filepath.Dir(testutil.Hutch(t)), "hutch-agent")
			}
			cfg.StateDir = stateDir(t)
			m := newManager(t, cfg)
			ctx := longCtx(t)
			dir := volumeDir(t)
			if fi, err := os.Lstat("/var/run"); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Log("the host has no /var/run link; the host's root is not tried")
			} else {
				name := fmt.Sprintf("hutch-volume-link-%d", os.Getpid())
				_, err := m.Create(ctx, "a", CreateRequest{Volumes: []Volume{{Name: "v", Dir: dir, At: "/var/run/" + name}}})
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "symbolic link") {
					t.Errorf("a volume at /var/run/%s (/var/run a link): %v, want refused", name, err)
				}
				if _, err := os.Lstat("/run/" + name); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("/run/%s on the host: %v", name, err)
				}
			}

			img := imagetest.BusyboxWith(t, func(ok bool, reason string) { testutil.Need(t, ok, reason) }, nil,
				imagetest.Symlink("mnt", "/etc"), imagetest.Symlink("data", "../../.."))
			if _, err := fetch.Import(m.images, imagetest.DockerSave(t, img, "hutch.test/links:1", t.TempDir()), "", fetch.Options{Root: true}); err != nil {
				t.Fatal(err)
			}
			root := policy.ImagePrefix + "hutch.test/links:1"
			for _, at := range []string{"/mnt/v", "/data/v", "/data/etc/v"} {
				_, err := m.Create(ctx, "a", CreateRequest{Policy: policy.Spec{Root: root}, Volumes: []Volume{{Name: "v", Dir: dir, At: at}}})
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "symbolic link") {
					t.Errorf("a volume at %s through an image's link: %v, want refused", at, err)
				}
			}
			for _, p := range []string{"/etc/v", "/v"} {
				if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s on the host: %v", p, err)
				}
			}
			// A path of the image without a link works, and the image's
			// links stay as they are.
			info := mustCreate(t, m, "a", CreateRequest{Policy: policy.Spec{Root: root}, Volumes: []Volume{{Name: "v", Dir: dir, At: "/srv/v"}}})
			if out := mustRun(t, m, "a", info.ID, `readlink /mnt; readlink /data; echo in >/srv/v/f; test -e /etc/v || echo no-etc-v`); out != "/etc\n../../..\nno-etc-v\n" {
				t.Errorf("the image's sandbox:\n%s", out)
			}
			if got := readHost(filepath.Join(dir, "f")); got != "in\n" {
				t.Errorf("the host's file: %q", got)
			}
			if list, err := m.List(context.Background(), "a", nil, store.StateRunning); err != nil || len(list) != 1 {
				t.Errorf("running sandboxes: %+v, %v; want the one", list, err)
			}
		})
	}
}

// TestVolumesNotWarm: a create with volumes never takes a warm sandbox
// (started before any request, without them): it starts one of its own,
// which has them, and the pool keeps its sandbox.
func TestVolumesNotWarm(t *testing.T) {
	m := newManager(t, Config{Warm: 1})
	waitWarm(t, m, 1)
	dir := volumeDir(t)
	info := mustCreate(t, m, "a", CreateRequest{Volumes: []Volume{{Name: "v", Dir: dir, At: "/data"}}})
	if out := mustRun(t, m, "a", info.ID, `echo hi >/data/f; cat /data/f`); out != "hi\n" {
		t.Errorf("the sandbox's volume: %q", out)
	}
	if n := m.pools[0].readyCount(); n != 1 {
		t.Errorf("the pool holds %d warm sandboxes after a create with volumes, want 1", n)
	}
}
