//go:build linux

package escape

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// client runs a client command of hutch on the daemon's socket.
func (d *served) client(args ...string) result {
	d.t.Helper()
	cmd := exec.Command(testutil.Hutch(d.t), args...)
	dir := d.t.TempDir()
	cmd.Env = []string{"HOME=" + dir, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C", "HUTCH_HOST=unix://" + d.sock}
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String(), code: -1}
	if cmd.ProcessState == nil {
		d.t.Fatalf("hutch %q: %v", args, err)
	}
	r.code = exitCode(cmd.ProcessState)
	return r
}

// createCLI makes a sandbox with the daemon's defaults (and args, hutch
// create's flags) through hutch create and returns its id.
func (d *served) createCLI(args ...string) string {
	d.t.Helper()
	return d.clientID(append([]string{"create"}, args...)...)
}

// clientID runs the client command args, which must succeed and print an
// id (hutch create's, hutch snapshot's) last, and returns that id.
func (d *served) clientID(args ...string) string {
	d.t.Helper()
	r := d.client(args...)
	if r.code != 0 {
		d.t.Fatalf("hutch %s:\n%s", strings.Join(args, " "), r)
	}
	ls := strings.Fields(r.stdout)
	if len(ls) == 0 {
		d.t.Fatalf("hutch %s printed no id:\n%s", strings.Join(args, " "), r)
	}
	return ls[len(ls)-1]
}

// attacker uploads the attacker program into sandbox id and returns its
// path there.
func (d *served) attacker(id string) string {
	d.t.Helper()
	sb := &harness{t: d.t, mode: modes[0], ws: d.t.TempDir()}
	local := filepath.Join(sb.ws, sb.attacker())
	const dst = "attacker"
	if r := d.client("cp", local, id+":"+dst); r.code != 0 {
		d.t.Fatalf("hutch cp of the attacker:\n%s", r)
	}
	return "./attacker"
}

// pid1 returns the host pid of the PID 1 of the daemon's only sandbox:
// the child of the daemon that is pid 1 of a pid namespace of its own.
func (d *served) pid1() int {
	d.t.Helper()
	var found []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st := procStatus(pid)
		if st["PPid"] == strconv.Itoa(d.cmd.Process.Pid) && strings.HasSuffix(st["NSpid"], " 1") {
			found = append(found, pid)
		}
	}
	if len(found) != 1 {
		d.t.Fatalf("want exactly one sandbox PID 1 below the daemon, found %v", found)
	}
	return found[0]
}

// procStatus reads /proc/PID/status into its fields (values with their
// runs of blanks made one space).
func procStatus(pid int) map[string]string {
	m := map[string]string{}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok {
			m[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	return m
}

// checkHostFDs fails the test unless every descriptor of host process pid
// is something of the sandbox's own (a socket, pipe, anonymous inode, a
// character device): none may be a host file or directory, and 0–2 must
// be /dev/null when null is set.
func checkHostFDs(t *testing.T, pid int, what string, null bool) {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("%s: list descriptors: %v", what, err)
	}
	var desc []string
	for _, e := range entries {
		p := dir + "/" + e.Name()
		link, _ := os.Readlink(p)
		desc = append(desc, e.Name()+"="+link)
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			continue // closed meanwhile
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG, unix.S_IFDIR, unix.S_IFLNK, unix.S_IFBLK:
			t.Errorf("%s holds descriptor %s to a host file: %s", what, e.Name(), link)
		}
		if n, _ := strconv.Atoi(e.Name()); null && n <= 2 && (st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != unix.Mkdev(1, 3)) {
			t.Errorf("%s: descriptor %d is %s, want /dev/null", what, n, link)
		}
	}
	if null && len(entries) < 3 {
		t.Errorf("%s: descriptors %v, want 0–2 open on /dev/null", what, desc)
	}
	t.Logf("%s: descriptors %v", what, desc)
}

// pid1Attacks are tried against PID 1 from inside; every one must be
// refused (ESCAPES 27).
var pid1Attacks = map[string][]string{
	"pid1_mem_rw":    {"EACCES", "EPERM"},
	"pid1_mem_read":  {"maps:EACCES", "EACCES", "EPERM"},
	"pid1_environ":   {"EACCES", "EPERM"},
	"pid1_fds":       {"EACCES", "EPERM"},
	"pid1_fd_write":  {"EACCES", "EPERM"},
	"pid1_map_files": {"EACCES", "EPERM"},
	"pid1_root":      {"EACCES", "EPERM"},
	"pid1_vm_writev": {"EPERM"},
	"pid1_ptrace":    {"EPERM"},
}

// expectPID1 checks the attacker's results against pid1Attacks; a result
// "maps:EACCES" is compared whole. Under gVisor (gvisor) /proc/PID/map_files
// does not exist at all: ENOENT refuses that attack too.
func expectPID1(t *testing.T, r result, who string, gvisor bool) {
	t.Helper()
	got := attacks(r.stdout)
	for _, a := range sortedKeys(pid1Attacks) {
		res, ok := got[a]
		if !ok {
			t.Errorf("%s: attack %s: no result printed\n%s", who, a, r)
			continue
		}
		first, _, _ := strings.Cut(res, " ")
		ok = gvisor && a == "pid1_map_files" && first == "ENOENT"
		for _, w := range pid1Attacks[a] {
			ok = ok || first == w
		}
		if !ok {
			t.Errorf("%s: attack %s on PID 1: got %q, want one of %q", who, a, res, pid1Attacks[a])
		}
	}
}

// TestItem27_ServedPID1: in a sandbox of hutch serve, PID 1 is hutch's
// agent, which holds the daemon's connection. Code inside — as the
// sandbox's root, which keeps chown, dac_override, fowner, fsetid, kill,
// setuid and setgid in its own namespace, and as uid 1000 — can neither
// open its memory (read or write), read its environment, list or reopen
// its descriptors, list its mapped files, follow its root, write to it
// with process_vm_writev nor trace it (the agent is not dumpable; as
// root's, its /proc files belong to the sandbox's root, who lacks
// CAP_SYS_PTRACE). From the host: the agent's descriptors 0–2 are
// /dev/null and none leads to a host file (the daemon's log it used to
// inherit), nothing reached the daemon's log from inside, and a command
// the agent starts holds its own three pipes (or /dev/null for stdin)
// and nothing else.
func TestItem27_ServedPID1(t *testing.T) {
	forEachServedTier(t, func(t *testing.T, tier []string) {
		d := startServed(t, "", false, tier...)
		id := d.createCLI()
		a := d.attacker(id)
		names := sortedKeys(pid1Attacks)

		t.Run("root", func(t *testing.T) {
			r := d.client(append([]string{"exec", id, "--", a, "whoami"}, names...)...)
			t.Log(r)
			who := whoami(t, r, "whoami")
			if who["uid"] != "0" || who["capeff"] == "0000000000000000" {
				t.Fatalf("the attacks must run as the sandbox's root with its capabilities: %v", who)
			}
			expectPID1(t, r, "root", underGVisor(tier))
		})
		t.Run("uid1000", func(t *testing.T) {
			r := d.client(append([]string{"exec", id, "--", a, "become:1000", "whoami"}, names...)...)
			t.Log(r)
			if who := whoami(t, r, "whoami"); who["uid"] != "1000" {
				t.Fatalf("the attacks must run as uid 1000: %v", who)
			}
			expectPID1(t, r, "uid 1000", underGVisor(tier))
		})
		t.Run("children", func(t *testing.T) {
			r := d.client("exec", id, "--", a, "fds")
			fds := strings.Fields(attacks(r.stdout)["fds"])
			if len(fds) != 4 || fds[0] != "ok" {
				t.Fatalf("a command of the agent must hold exactly descriptors 0–2:\n%s", r)
			}
			for i, f := range fds[1:] {
				// stdin is /dev/null without exec -i.
				if !strings.HasPrefix(f, strconv.Itoa(i)+"=pipe:") && f != "0=/dev/null" {
					t.Errorf("descriptor %s of a command: want its own pipe", f)
				}
			}
		})
		t.Run("host", func(t *testing.T) {
			// Under gVisor the agent is a task of gVisor's kernel, not a host
			// process: what it holds are the Sentry's descriptors.
			if !underGVisor(tier) {
				checkHostFDs(t, d.pid1(), "the agent", true)
			}
			if strings.Contains(d.logText(), "written through PID 1") {
				t.Errorf("the sandbox wrote into the daemon's log:\n%s", d.logText())
			}
		})
	})
}

// TestItem27_RunPID1: hutch run's PID 1, the first process that stays
// to reap orphans and pass signals on, is as closed to the command as the
// agent (see TestItem08_ProcAndProcesses too), and from the host it holds
// no descriptor to a host file or directory once the command runs: not
// what hutch had open when it cloned it, not the caller's streams.
func TestItem27_RunPID1(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		a := sb.attacker()
		if sb.gvisor() {
			// Under gVisor hutch has a PID 1 inside in mode proxy only, its
			// relay (gvisor-init); in mode none PID 1 is the command. What it
			// holds on the host are runsc's descriptors: there is no hutch
			// process in the sandbox to look at from outside.
			r := sb.run(opts{flags: []string{"--net", "proxy", "--allow-domain", "example.com"}}, argv(a, sortedKeys(pid1Attacks)...))
			expectPID1(t, r, sb.mode.name, true)
			return
		}
		r := sb.run(opts{}, argv(a, sortedKeys(pid1Attacks)...))
		expectPID1(t, r, sb.mode.name, false)

		for _, flags := range [][]string{nil, {"--net", "proxy", "--allow-domain", "example.com", "--memory", "256m"}} {
			args := append(append([]string{"run"}, flags...), "--", "/bin/sh", "-c", "echo ready; exec sleep 60")
			p := sb.start(opts{}, args...)
			if !testutil.Eventually(2*time.Minute, func() bool { return strings.Contains(readBack(t, p.outF), "ready") }) {
				_ = p.cmd.Process.Kill()
				t.Fatalf("the sandbox did not start:\n%s", p.wait())
			}
			var pid1 int
			entries, _ := os.ReadDir("/proc")
			for _, e := range entries {
				pid, err := strconv.Atoi(e.Name())
				if err != nil {
					continue
				}
				st := procStatus(pid)
				if st["PPid"] == strconv.Itoa(p.cmd.Process.Pid) && strings.HasSuffix(st["NSpid"], " 1") {
					pid1 = pid
				}
			}
			if pid1 == 0 {
				t.Errorf("%v: no PID 1 found below hutch", flags)
			} else {
				// PID 1 closes what it holds once it has reported the
				// command started, which may come after the command's
				// first output on a busy machine: wait for the caller's
				// stdout (descriptor 1) to be gone, then look.
				testutil.Eventually(2*time.Minute, func() bool {
					_, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/1", pid1))
					return err != nil
				})
				checkHostFDs(t, pid1, fmt.Sprintf("hutch run %v: PID 1", flags), false)
			}
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			p.wait()
		}
	})
}
