package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/gvisor"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// gvisorFlags are hutch run's flags for the gVisor tier with the test's
// runsc, which must be the pinned version.
func gvisorFlags(t *testing.T) []string {
	t.Helper()
	bin := testutil.Runsc(t)
	if _, err := gvisor.Find(bin); err != nil {
		t.Fatalf("the test's runsc: %v", err)
	}
	return []string{"--tier", "gvisor", "--runsc", bin}
}

// runscProcesses lists the processes of runsc whose command lines name
// dir (runsc and its gofer and Sentry name their state directory).
func runscProcesses(dir string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte("runsc")) && bytes.Contains(b, []byte(dir)) {
			out = append(out, pid)
		}
	}
	return out
}

// stateDirOf returns the state directory of the gVisor sandbox that hutch
// process pid runs (its owner file names pid), or "".
func stateDirOf(pid int) string {
	entries, _ := os.ReadDir(gvisor.DefaultStateDir)
	for _, e := range entries {
		dir := filepath.Join(gvisor.DefaultStateDir, e.Name())
		if b, err := os.ReadFile(filepath.Join(dir, "owner")); err == nil && strings.HasPrefix(string(b), strconv.Itoa(pid)+" ") {
			return dir
		}
	}
	return ""
}

// startUntil starts `hutch run ARGS` in workspace ws and waits until the
// command printed ready; hutch is killed when the test ends.
func startUntil(t *testing.T, ws string, args []string, ready string) (*exec.Cmd, *testutil.Buffer) {
	t.Helper()
	cmd := exec.Command(testutil.Hutch(t), append([]string{"run"}, args...)...)
	cmd.Dir = ws
	cmd.Env = baseEnv(ws)
	out := &testutil.Buffer{}
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	if !testutil.Eventually(guard, func() bool { return strings.Contains(out.String(), ready) }) {
		t.Fatalf("the sandbox did not start; it printed %q", out.String())
	}
	return cmd, out
}

// TestGVisorRun drives hutch run --tier gvisor as a user would: the
// command runs on gVisor's kernel with the caller's environment scrubbed,
// and exit codes are the namespace tier's.
func TestGVisorRun(t *testing.T) {
	flags := gvisorFlags(t)
	ws := hostDir(t)
	env := append(baseEnv(ws), "AWS_SECRET_ACCESS_KEY=hunter2", "HUTCH_TEST_SECRET=x")
	r := sandboxed(t, invocation{dir: ws, env: env, args: sh("uname -r; cat /proc/version; env; echo out > file; exit 7", flags...)})
	wantCode(t, r, 7)
	if !strings.Contains(r.stdout, "gvisor") {
		t.Errorf("the command did not see gVisor's kernel:\n%s", r)
	}
	if strings.Contains(r.stdout, "hunter2") || strings.Contains(r.stdout, "HUTCH_TEST_SECRET") {
		t.Errorf("the environment was not scrubbed:\n%s", r)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "file")); err != nil || string(b) != "out\n" {
		t.Errorf("the workspace's file: %q, %v", b, err)
	}
	r = sandboxed(t, invocation{dir: ws, args: append(append([]string{}, flags...), "--", "no-such-command-hutch-test")})
	wantCode(t, r, 127)
	r = sandboxed(t, invocation{dir: ws, args: sh("sleep 600", append([]string{"--timeout", "1s"}, flags...)...)})
	wantCode(t, r, 124)
}

// TestGVisorKilled checks S4 when hutch itself is killed with SIGKILL:
// runsc and its sandbox die with it, and the next hutch removes the state
// they left.
func TestGVisorKilled(t *testing.T) {
	flags := gvisorFlags(t)
	ws := hostDir(t)
	cmd, _ := startUntil(t, ws, sh("sleep 600 & echo started; sleep 600", flags...), "started")
	dir := stateDirOf(cmd.Process.Pid)
	if dir == "" || len(runscProcesses(dir)) == 0 {
		t.Fatalf("no state directory (%q) or runsc process while the sandbox runs: the test cannot tell anything", dir)
	}
	checkSentryCredentials(t, dir)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if !testutil.Eventually(guard, func() bool { return len(runscProcesses(dir)) == 0 }) {
		t.Errorf("runsc processes outlived hutch killed with SIGKILL: %v", runscProcesses(dir))
	}
	// The next sandbox removes what the killed one left.
	wantOK(t, sandboxed(t, invocation{dir: ws, args: append(append([]string{}, flags...), "--", "true")}))
	if _, err := os.Lstat(dir); err == nil {
		t.Errorf("state left behind: %s", dir)
	}
}

// checkSentryCredentials checks S1 under gVisor: the Sentry, and the stub
// processes in which the command's code runs, hold no host-root
// credentials: not uid 0, no capability.
func checkSentryCredentials(t *testing.T, dir string) {
	t.Helper()
	status := func(pid int, field string) string {
		b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, field+":"); ok {
				return strings.Fields(v)[0]
			}
		}
		return ""
	}
	seen := 0
	for _, pid := range runscProcesses(dir) {
		cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if !bytes.HasPrefix(cmdline, []byte("runsc-sandbox")) {
			continue
		}
		pids := []int{pid}
		tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "children"))
		for _, f := range tasks {
			b, _ := os.ReadFile(f)
			for _, c := range strings.Fields(string(b)) {
				if n, err := strconv.Atoi(c); err == nil {
					pids = append(pids, n)
				}
			}
		}
		for _, p := range pids {
			uid, caps := status(p, "Uid"), status(p, "CapEff")
			if uid == "" {
				continue // gone
			}
			seen++
			if uid == "0" || caps != "0000000000000000" {
				t.Errorf("process %d of the sandbox has uid %s, capabilities %s (S1)", p, uid, caps)
			}
		}
	}
	if seen == 0 {
		t.Error("found no Sentry process to check")
	}
}

// TestGVisorTerminal checks the pty under gVisor: input typed reaches the
// command, its output and the window size come through, the exit code is
// the command's, and the user's terminal is restored.
func TestGVisorTerminal(t *testing.T) {
	flags := gvisorFlags(t)
	term := newTerminal(t, 33, 77)
	before, err := unix.IoctlGetTermios(int(term.master.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	for _, net := range gvisorNets {
		t.Run(net[1], func(t *testing.T) {
			term := newTerminal(t, 33, 77)
			_, waited := startOnTerminal(t, term, sh("test -t 0 && echo terminal; stty size; echo ready; read x; echo got:$x; exit 3", append(net, flags...)...)...)
			out := typeHello(t, term, waited)
			for _, want := range []string{"terminal\n", "33 77\n", "got:hello\n"} {
				if !strings.Contains(out, want) {
					t.Errorf("the terminal does not show %q:\n%s", want, out)
				}
			}
			after, err := unix.IoctlGetTermios(int(term.master.Fd()), unix.TCGETS)
			if err != nil {
				t.Fatal(err)
			}
			if before.Lflag != after.Lflag || before.Iflag != after.Iflag {
				t.Errorf("terminal modes not restored: before %s, after %s", modes(before), modes(after))
			}
		})
	}
}

// gvisorNets are the network modes the gVisor tests of the terminal,
// signals and exit codes run in: without the proxy the command is the
// sandbox's first process, with it hutch's relay is.
var gvisorNets = [][]string{{"--net", "none"}, {"--net", "proxy", "--allow-domain", "example.test"}}

// TestGVisorSignal checks that a signal to hutch reaches the command.
func TestGVisorSignal(t *testing.T) {
	flags := gvisorFlags(t)
	for _, net := range gvisorNets {
		t.Run(net[1], func(t *testing.T) {
			cmd, out := startUntil(t, hostDir(t), sh(`trap 'echo got TERM; exit 9' TERM; echo ready; while :; do sleep 1; done`, append(net, flags...)...), "ready")
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(guard):
				t.Fatal("hutch did not end after SIGTERM")
			}
			if code := cmd.ProcessState.ExitCode(); code != 9 || !strings.Contains(out.String(), "got TERM") {
				t.Errorf("exit %d, output %q: the command did not get SIGTERM", code, out.String())
			}
		})
	}
}

// TestGVisorExitCodes: the exit codes are the command's in both network
// modes: its own, 128+N when signal N killed it, and 0 at once when it
// ends leaving a process behind (gVisor ends the rest).
func TestGVisorExitCodes(t *testing.T) {
	flags := gvisorFlags(t)
	for _, net := range gvisorNets {
		t.Run(net[1], func(t *testing.T) {
			for _, tt := range []struct {
				script string
				code   int
			}{{"exit 7", 7}, {"kill -KILL $$", 137}, {"sleep 600 & echo started", 0}} {
				r := sandboxed(t, invocation{args: sh(tt.script, append(net, flags...)...)})
				wantCode(t, r, tt.code)
			}
		})
	}
}
