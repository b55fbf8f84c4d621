//go:build linux

package escape

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// widening is a policy that would open the sandbox up: the home writable
// and the default deny lists dropped.
func widening(home string) string {
	return fmt.Sprintf("filesystem:\n  allow_write: [%q]\n  no_default_denies: true\n", home)
}

// TestItem20_PolicyFile: the sandbox cannot rewrite the policy file it runs
// under, so it cannot widen its next run. Outside every writable area the
// file is read-only like the rest of the host; it must stay so when it
// lies inside a writable area too: in the workspace, or in a home made
// writable with --allow-write. The workspace itself stays writable (the
// control), and the policy files are unchanged afterwards (S2, S5).
func TestItem20_PolicyFile(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		outside := filepath.Join(hostDir(t, sb.mode.uid, "policy"), "policy.yaml")
		inWS := filepath.Join(sb.ws, "hutch-policy.yaml")
		mkdirs(t, sb.home, sb.mode.uid, ".config/hutch")
		inHome := filepath.Join(sb.home, ".config/hutch/policy.yaml")
		for _, c := range []struct {
			name, path string
			flags      []string
		}{
			{"outside", outside, nil},
			{"workspace", inWS, nil},
			{"writable-home", inHome, []string{"--allow-write", sb.home}},
		} {
			t.Run(c.name, func(t *testing.T) {
				writeFile(t, c.path, "resources:\n  pids: 512\n", 0o644, sb.mode.uid)
				before, _ := os.ReadFile(c.path)
				script := fmt.Sprintf(`
echo control > control; echo "RC control $?"
printf '%%s' '%[2]s' >> %[1]q; echo "RC append $?"
printf '%%s' '%[2]s' > %[1]q; echo "RC overwrite $?"
mv %[1]q %[1]q.old; echo "RC rename $?"
rm -f %[1]q; echo "RC rm $?"
`, c.path, widening(sb.home))
				r := sb.run(opts{flags: append([]string{"--policy", c.path}, c.flags...)}, script)
				if !strings.Contains(r.stdout, "RC control 0") {
					t.Errorf("control failed: the workspace was not writable\n%s", r)
				}
				for _, a := range []string{"append", "overwrite", "rename", "rm"} {
					if strings.Contains(r.stdout, "RC "+a+" 0") {
						t.Errorf("the sandbox could %s its own policy file %s", a, c.path)
					}
				}
				if after, err := os.ReadFile(c.path); err != nil || string(after) != string(before) {
					t.Errorf("the policy file changed: %q → %q (%v)", before, after, err)
				}
				os.Remove(c.path + ".old")
				os.Remove(filepath.Join(sb.ws, "control"))
			})
		}
	})
}

// TestItem20_NoImplicitConfig: hutch reads no policy from the workspace by
// itself (S2): a repository can carry .hutch.yaml, hutch.yaml, .hutch.json,
// .hutch/policy.yaml or srt's .srt-settings.json that would make the home
// writable and drop the default denies, and none takes effect: nothing
// written in the home reaches the host, ~/.ssh stays masked, .bashrc stays protected, and
// "hutch policy show" in that directory shows the defaults.
func TestItem20_NoImplicitConfig(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		secrets, notes := plantSecrets(t, sb.home, sb.mode.uid)
		w := widening(sb.home)
		srt := fmt.Sprintf(`{"filesystem": {"allowWrite": [%q], "denyRead": []}}`, sb.home)
		mkdirs(t, sb.ws, sb.mode.uid, ".hutch")
		for name, content := range map[string]string{
			".hutch.yaml": w, "hutch.yaml": w, ".hutch.yml": w, "hutch.yml": w,
			".hutch.json": "{}", ".hutch/policy.yaml": w, ".srt-settings.json": srt, "srt-settings.json": srt,
		} {
			writeFile(t, filepath.Join(sb.ws, name), content, 0o644, sb.mode.uid)
		}
		script := `
cat "$HOME/notes.txt"
echo pwned > "$HOME/pwned"; echo "RC home $?"
cat "$HOME/.ssh/id_rsa"; echo "RC ssh $?"
echo pwned >> .bashrc; echo "RC bashrc $?"
`
		r := sb.run(opts{}, script)
		noSecret(t, r, secrets)
		if !strings.Contains(r.stdout, notes) {
			t.Errorf("control failed: ~/notes.txt unreadable\n%s", r)
		}
		if exists(filepath.Join(sb.home, "pwned")) {
			t.Errorf("a policy file in the workspace made the home writable\n%s", r)
		}
		for _, bad := range []string{"RC ssh 0", "RC bashrc 0"} {
			if strings.Contains(r.stdout, bad) {
				t.Errorf("a policy file in the workspace took effect (%s)\n%s", bad, r)
			}
		}
		if exists(filepath.Join(sb.home, "pwned")) {
			t.Errorf("the sandbox wrote into the home directory")
		}
		show := sb.hutch(opts{}, "policy", "show")
		if show.code != 0 || strings.Contains(show.stdout, "no_default_denies: true") || !strings.Contains(show.stdout, ".ssh") {
			t.Errorf("hutch policy show in the workspace does not show the defaults\n%s", show)
		}
	})
}

// TestItem20_LeakedFDs: the command starts with descriptors 0, 1 and 2
// only (S3): not hutch's control socket to its init, and not descriptors
// hutch itself inherited from its caller without close-on-exec (here an
// open root-only file, readable through the descriptor whatever its
// permissions and masks, and the host's root directory, which leads
// around the sandbox's mounts). Init's own descriptors cannot be resolved
// either.
func TestItem20_LeakedFDs(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		dir := hostDir(t, 0, "fdleak")
		secret := randomName("hutch-fd-secret-")
		writeFile(t, filepath.Join(dir, "secret"), secret+"\n", 0o600, 0)
		f, err := os.Open(filepath.Join(dir, "secret"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		root, err := os.Open("/")
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		a := sb.attacker()
		r := sb.run(opts{extraFiles: []*os.File{f, root, f}}, argv(a, "fds")+`
for fd in 3 4 5 6 7 8 9; do [ -f /proc/self/fd/$fd ] && (cat <&$fd) 2>/dev/null; done
for l in /proc/1/fd/*; do readlink "$l" && echo "INIT-FD-VISIBLE $l"; done 2>/dev/null
`)
		got := attacks(r.stdout)["fds"]
		fds := strings.Fields(strings.TrimPrefix(got, "ok"))
		var names []string
		for _, fd := range fds {
			n, _, _ := strings.Cut(fd, "=")
			names = append(names, n)
		}
		if strings.Join(names, ",") != "0,1,2" {
			t.Errorf("want only descriptors 0,1,2 open in the command, got %s", got)
		}
		if strings.Contains(r.stdout, secret) {
			t.Errorf("a root-only file was read through a descriptor leaked into the sandbox")
		}
		if sb.gvisor() {
			// Under gVisor PID 1 is the command's own shell, whose
			// descriptors are its own: what must hold is that none
			// reaches the host file or directory hutch was given.
			for _, l := range strings.Split(r.stdout, "\n") {
				if l == "/" || strings.Contains(l, dir) {
					t.Errorf("PID 1 holds a host file or directory: %s\n%s", l, r)
				}
			}
		} else if strings.Contains(r.stdout, "INIT-FD-VISIBLE") {
			t.Errorf("init's descriptors can be resolved from the command\n%s", r)
		}
	})
}

// TestItem20_FailClosed: when hutch cannot set the sandbox up as asked it
// refuses to run, names the problem and exits 125, and the command never
// runs, in or out of a sandbox (S2): a missing root, a root directory that
// lacks what the sandbox needs, a missing workspace, a policy with an
// unknown key or an out-of-range value, and a resource limit that cannot be
// enforced without a cgroup (unless --best-effort, which then says what
// was dropped). A command that exists only on the host, not in the
// sandbox's view, is not found (127) rather than run outside. Removing a
// kernel feature (Landlock, seccomp) cannot be simulated from a test: hutch
// has no hook for it, so that path is not covered here.
func TestItem20_FailClosed(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		ran := filepath.Join(sb.ws, "ran")
		script := "echo ran > " + ran
		empty := hostDir(t, sb.mode.uid, "emptyroot")
		polDir := hostDir(t, sb.mode.uid, "policy")
		unknown := filepath.Join(polDir, "unknown.yaml")
		writeFile(t, unknown, "filesystem:\n  allow_writes: [/]\n", 0o644, sb.mode.uid)
		bad := filepath.Join(polDir, "bad.yaml")
		writeFile(t, bad, "resources:\n  pids: 2\n", 0o644, sb.mode.uid)
		for _, c := range []struct {
			name  string
			flags []string
			want  string // in stderr
		}{
			{"missing-root", []string{"--root", "/nonexistent-hutch-root"}, "root"},
			{"empty-root", []string{"--root", empty}, ""},
			{"missing-workspace", []string{"--workspace", "/nonexistent-hutch-ws"}, "workspace"},
			{"unknown-key", []string{"--policy", unknown}, "allow_writes"},
			{"bad-value", []string{"--policy", bad}, "pids"},
		} {
			r := sb.run(opts{flags: c.flags, noCheck: true}, script)
			if r.code != 125 && r.code != 127 {
				t.Errorf("%s: want exit 125 (or 127 when the root lacks /bin/sh)\n%s", c.name, r)
			}
			if !strings.Contains(r.stderr, c.want) {
				t.Errorf("%s: the error does not name %q\n%s", c.name, c.want, r)
			}
			if exists(ran) {
				t.Fatalf("%s: the command ran although hutch reported a failure", c.name)
			}
		}

		// A CPU limit needs a cgroup; without one hutch refuses.
		r := sb.run(opts{flags: []string{"--cpus", "0.5"}, noCheck: true}, script)
		switch {
		case r.code == 125:
			if !strings.Contains(r.stderr, "cgroup") || !strings.Contains(r.stderr, "--best-effort") || exists(ran) {
				t.Errorf("--cpus without a cgroup: want a refusal naming the cgroup and --best-effort, and no run\n%s", r)
			}
			r = sb.run(opts{flags: []string{"--cpus", "0.5", "--best-effort"}}, script)
			if r.code != 0 || !exists(ran) || !strings.Contains(r.stderr, "warning: running without") {
				t.Errorf("--best-effort: want the command run with a warning naming the dropped limit\n%s", r)
			}
		case r.code == 0:
			t.Logf("%s: a cgroup enforces --cpus here", sb.mode.name)
		default:
			t.Errorf("--cpus 0.5: unexpected result\n%s", r)
		}
		os.Remove(ran)

		// A program that exists only in the host's /tmp (the sandbox has
		// a private one) is not found inside, and never run outside.
		tmpDir, err := os.MkdirTemp("", "hutch-hostonly-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(tmpDir)
		if err := os.Chmod(tmpDir, 0o755); err != nil {
			t.Fatal(err)
		}
		marker := filepath.Join(tmpDir, "prog")
		writeFile(t, marker, "#!/bin/sh\necho ran > "+ran+"\n", 0o755, 0)
		r = sb.hutch(opts{noCheck: true}, "run", "--", marker)
		if r.code != 127 || exists(ran) {
			t.Errorf("a host-only program: want 127 and no run\n%s", r)
		}
	})
}
