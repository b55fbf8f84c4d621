//go:build linux

package escape

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/gvisor/gvisortest"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// volumeDaemon is a daemon of tier, in this process (no front end
// takes volumes in this version: the E2B volume API comes on its own),
// whose sandboxes run the built hutch-agent; its state directory
// is outside /tmp, which sandboxes replace.
func volumeDaemon(t *testing.T, tier string) (*daemon.Manager, string) {
	t.Helper()
	testutil.RequireRoot(t)
	state := hostDir(t, 0, "volume-daemon")
	cfg := daemon.Config{StateDir: filepath.Join(state, "state"), AgentBinary: filepath.Join(filepath.Dir(testutil.Hutch(t)), "hutch-agent")}
	if tier == policy.TierGVisor {
		cfg.DefaultTier, cfg.Runtimes = policy.TierGVisor, gvisortest.Runtimes(t)
	}
	m, err := daemon.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m, cfg.StateDir
}

// runIn runs script with sh in the daemon's sandbox id, as its root.
func runIn(t *testing.T, m *daemon.Manager, id, script string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := m.Agent(ctx, "a", id)
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Exec(ctx, agent.ExecRequest{Args: []string{"sh", "-c", script}})
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	done := make(chan struct{})
	go func() { _, _ = io.Copy(&errOut, p.Stderr); close(done) }()
	_, _ = io.Copy(&out, p.Stdout)
	<-done
	st, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	return result{stdout: out.String(), stderr: errOut.String(), code: st.Code}
}

// TestItem07_Volumes: a host directory shown in a served sandbox (a
// volume) is no way out of it, in either tier (S5, S3): ".." from the
// volume's path is the sandbox's own root, never the host directory that
// holds the volume; a symbolic link the sandbox writes in the volume is
// resolved in the sandbox's view only (a link to the volume's host
// neighbours finds nothing); the sandbox can neither unmount the volume,
// nor mount over it, nor remount it (seccomp, and no CAP_SYS_ADMIN); a
// sandbox not given the volume sees it nowhere, at the other's path or
// the host's; a link the sandbox plants on the volume's way in its own
// root is never followed when the volume is mounted again (gVisor's cold
// boot refuses it). Outside the volume the host is unchanged; the control —
// writing in the volume — works.
func TestItem07_Volumes(t *testing.T) {
	testutil.RequireRoot(t)
	t.Parallel()
	for _, tier := range []string{policy.TierNamespace, policy.TierGVisor} {
		t.Run(tier, func(t *testing.T) {
			t.Parallel()
			m, state := volumeDaemon(t, tier)
			// Where a front end keeps volumes: below the daemon's state
			// directory, next to other tenants' volumes and secrets.
			vols := filepath.Join(state, "volumes")
			dir := filepath.Join(vols, "mine")
			mkdirs(t, state, 0, "volumes/mine", "volumes/other")
			writeFile(t, filepath.Join(vols, "other", "SECRET-other"), "SECRET-other-volume\n", 0o644, 0)
			writeFile(t, filepath.Join(vols, "SECRET-beside"), "SECRET-beside-volume\n", 0o644, 0)
			// The attacker program, in the volume.
			(&harness{t: t, ws: dir, mode: mode{uid: 0, tier: tier}}).attacker()
			before := snapshot(t, vols)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			info, err := m.Create(ctx, "a", daemon.CreateRequest{Volumes: []daemon.Volume{{Name: "mine", Dir: dir, At: "/data"}}})
			if err != nil {
				t.Fatal(err)
			}
			r := runIn(t, m, info.ID, `
echo written >/data/control; echo "RC control $?"
cat /data/../SECRET-beside /data/../other/SECRET-other; echo "RC dotdot $?"
cd /data && cat ../SECRET-beside ../../SECRET-beside; echo "RC cddotdot $?"
ls -a /data/.. | grep -c SECRET; ls / | grep -c SECRET
ln -s `+vols+`/SECRET-beside /data/link-beside && cat /data/link-beside; echo "RC linkbeside $?"
ln -s ../other/SECRET-other /data/link-rel && cat /data/link-rel; echo "RC linkrel $?"
ln -s `+vols+`/other /data/link-dir && ls /data/link-dir/; echo "RC linkdir $?"
cat `+vols+`/SECRET-beside; echo "RC hostpath $?"
mount -o remount,suid,dev /data; echo "RC remount $?"
umount /data; echo "RC umountcmd $?"
cat /data/control; echo "RC still $?"
cd /data && ./attacker umount:/data mount:/data umount:/ mount:/mnt
`)
			if strings.Contains(r.stdout+r.stderr, "-volume\n") || !strings.Contains(r.stdout, "RC cddotdot 1\n0\n0\n") {
				t.Errorf("the sandbox read beside its volume:\n%s", r)
			}
			if !strings.Contains(r.stdout, "RC control 0") || !strings.Contains(r.stdout, "written\nRC still 0") {
				t.Errorf("control: the sandbox could not write its volume, or lost it:\n%s", r)
			}
			if got, _ := os.ReadFile(filepath.Join(dir, "control")); string(got) != "written\n" {
				t.Errorf("control: the host's copy of the volume's file: %q", got)
			}
			for _, a := range []string{"dotdot", "cddotdot", "linkbeside", "linkrel", "linkdir", "hostpath", "remount", "umountcmd"} {
				if strings.Contains(r.stdout, "RC "+a+" 0") {
					t.Errorf("%s: succeeded\n%s", a, r)
				}
			}
			expect(t, r, map[string][]string{
				"umount:/data": {"EPERM"},
				"mount:/data":  {"EPERM"},
				"umount:/":     {"EPERM"},
				"mount:/mnt":   {"EPERM"},
			})
			// What the sandbox left in its volume is its own (links
			// included, never followed on the host); nothing else of the
			// host changed.
			sameTree(t, vols, before, "mine/control", "mine/link-beside", "mine/link-rel", "mine/link-dir")

			// A sandbox not given the volume.
			other, err := m.Create(ctx, "a", daemon.CreateRequest{})
			if err != nil {
				t.Fatal(err)
			}
			r = runIn(t, m, other.ID, `
ls /data; echo "RC at $?"
ls `+dir+`; echo "RC host $?"
cat `+dir+`/control; echo "RC file $?"
grep -c ' /data ' /proc/self/mountinfo
echo "RC control-ws $(pwd)"
`)
			for _, a := range []string{"at", "host", "file"} {
				if strings.Contains(r.stdout, "RC "+a+" 0") {
					t.Errorf("a sandbox without the volume reached it (%s):\n%s", a, r)
				}
			}
			if strings.Contains(r.stdout, "written") || !strings.Contains(r.stdout, "RC control-ws "+info.Workspace) {
				t.Errorf("a sandbox without the volume:\n%s", r)
			}

			// A link planted on the volume's way in the sandbox's own
			// root, then a boot afresh (where the gVisor tier mounts
			// everything again, from the saved root): the link is not
			// followed, the volume is not mounted where it points.
			mkdirs(t, state, 0, "volumes/deep")
			way, err := m.Create(ctx, "a", daemon.CreateRequest{Volumes: []daemon.Volume{{Name: "deep", Dir: filepath.Join(vols, "deep"), At: "/mnt/way/deep"}}})
			if err != nil {
				t.Fatal(err)
			}
			r = runIn(t, m, way.ID, `mv /mnt/way /mnt/old; echo "RC mv $?"; ln -s /etc /mnt/way; echo "RC ln $?"`)
			t.Logf("planting the link: %s", r.stdout)
			if _, err := m.PauseWith(ctx, "a", way.ID, daemon.PauseOptions{FilesOnly: true}); err != nil {
				t.Fatal(err)
			}
			_, err = m.ResumeWith(ctx, "a", way.ID, daemon.ResumeOptions{Reboot: true})
			if !strings.Contains(r.stdout, "RC mv 0\nRC ln 0") {
				t.Fatalf("control: the sandbox could not rename its own directory and make a link:\n%s", r)
			}
			if tier == policy.TierGVisor {
				// The tier mounts the volume again in the saved root:
				// the link is refused, and the sandbox stays paused.
				if err == nil || !strings.Contains(err.Error(), "symbolic link") {
					t.Errorf("resume over a planted link: %v, want refused", err)
				}
			} else {
				// The namespace tier's cold boot keeps its mounts: the
				// volume went along with the renamed directory.
				if err != nil {
					t.Fatal(err)
				}
				r = runIn(t, m, way.ID, `test -e /etc/deep && echo "FOUND /etc/deep"; echo moved >/mnt/old/deep/moved; echo "RC moved $?"`)
				if strings.Contains(r.stdout, "FOUND") || !strings.Contains(r.stdout, "RC moved 0") {
					t.Errorf("after the cold boot:\n%s", r)
				}
				if got, _ := os.ReadFile(filepath.Join(vols, "deep", "moved")); string(got) != "moved\n" {
					t.Errorf("the volume, moved with its parent: the host's file %q", got)
				}
			}
			if exists("/etc/deep") {
				t.Errorf("/etc/deep exists on the host")
			}
		})
	}
}
