package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestMicroVMDiesWithHutch (escape item 9 for the microvm tier: nothing
// outlives hutch): hutch run --tier microvm killed with SIGKILL while its
// guest runs a command takes QEMU and virtiofsd along and leaves no VM
// directory, even when the guest cannot help: QEMU is stopped (SIGSTOP)
// before the kill, so the guest neither sees the agent's connection end
// nor powers off. QEMU changes its ids (-runas), which clears a parent-death
// signal of its own: it is the reaper, PID 1 of QEMU's PID namespace,
// whose death ends it.
func TestMicroVMDiesWithHutch(t *testing.T) {
	ws := t.TempDir()
	env := microVMEnv(t, ws)
	tmp := t.TempDir() // where Boot makes the VM's directory
	env = append(env, "TMPDIR="+tmp)
	cmd := exec.Command(testutil.Hutch(t), append([]string{"run"}, sh("echo running; exec sleep 600", "--tier", "microvm", "--allow-emulation")...)...)
	cmd.Dir, cmd.Env = ws, env
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testutil.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	running := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := sc.Scan() && sc.Text() == "running"
		running <- ok
		for sc.Scan() {
		}
	}()
	select {
	case ok := <-running:
		if !ok {
			<-exited
			t.Fatalf("the guest did not run the command; stderr:\n%s", stderr.String())
		}
	case <-time.After(guard):
		t.Fatalf("the guest did not run the command within %v; stderr:\n%s", guard, stderr.String())
	}
	t.Logf("the guest runs the command after %v", time.Since(start))
	below := processesBelow(t, cmd.Process.Pid)
	vmDirs, _ := filepath.Glob(filepath.Join(tmp, "hutch-microvm-*"))
	if len(vmDirs) != 1 {
		t.Errorf("VM directories in hutch's TMPDIR: %q, want one", vmDirs)
	}
	stopQEMU(t, below)

	killed := time.Now()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited
	waitGone(t, below, "after hutch was killed")
	t.Logf("QEMU and virtiofsd gone %v after the kill", time.Since(killed))
	if left, _ := filepath.Glob(filepath.Join(tmp, "hutch-microvm-*")); len(left) != 0 {
		t.Errorf("after hutch was killed, VM directories left: %q", left)
	}
}

// TestServeMicroVMDiesWithDaemon: a served guest's usage is sampled
// (QEMU's, found under its reaper); a daemon killed with SIGKILL takes its
// guests along (S4), even a guest that cannot help (its QEMU stopped
// before the kill): QEMU and virtiofsd end with it, the VM's directory is
// removed, and the next daemon removes the sandbox's directory; the
// sandbox no longer answers.
func TestServeMicroVMDiesWithDaemon(t *testing.T) {
	env := microVMEnv(t, t.TempDir())
	kernelEnv := env[len(env)-1]
	d := startDaemonEnv(t, []string{kernelEnv}, nil, "--default-tier", "microvm", "--allow-emulation")
	r := d.admin(t, "create")
	wantOK(t, r)
	id := lastLine(r.stdout)
	wantOK(t, d.admin(t, "exec", id, "--", "true"))
	// Its usage is QEMU's, sampled by pid through the reaper.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		r = d.admin(t, "metrics", id)
		wantOK(t, r)
		if ls := lines(r.stdout); len(ls) >= 2 && strings.Contains(ls[1], " MiB / ") {
			// TIME CPU% of N MEMORY MiB / LIMIT MiB ...
			if f := strings.Fields(ls[1]); len(f) < 5 || f[4] == "0.0" {
				t.Errorf("a sample of the guest's usage without memory:\n%s", r.stdout)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sample of the guest's usage in a minute:\n%s", r.stdout)
		}
	}
	sbDir := filepath.Join(d.stateDir, "sandboxes", id)
	if _, err := os.Stat(filepath.Join(sbDir, "microvm")); err != nil {
		t.Errorf("the VM's directory: %v", err)
	}
	below := processesBelow(t, d.cmd.Process.Pid)
	stopQEMU(t, below)

	killed := time.Now()
	if err := d.cmd.Process.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.exited
	waitGone(t, below, "after the daemon was killed")
	t.Logf("QEMU and virtiofsd gone %v after the kill", time.Since(killed))
	if _, err := os.Stat(filepath.Join(sbDir, "microvm")); !os.IsNotExist(err) {
		t.Errorf("after the daemon was killed, the VM's directory: %v", err)
	}
	d.start(t)
	if _, err := os.Stat(sbDir); !os.IsNotExist(err) {
		t.Errorf("the next daemon left the killed one's sandbox directory: %v", err)
	}
	r = d.admin(t, "exec", id, "--", "true")
	if r.code == 0 {
		t.Errorf("a guest of the killed daemon still answers: %s", r)
	}
}

// stopQEMU stops the one QEMU among procs (SIGSTOP) and checks that
// virtiofsd runs beside it: a guest frozen, which cannot power off.
func stopQEMU(t *testing.T, procs []belowProc) {
	t.Helper()
	var qemu []belowProc
	virtiofsd := 0
	for _, p := range procs {
		switch {
		case strings.HasPrefix(p.comm, "qemu-system"):
			qemu = append(qemu, p)
		case p.comm == "virtiofsd":
			virtiofsd++
		}
	}
	if len(qemu) != 1 || virtiofsd == 0 {
		t.Fatalf("processes below hutch: %+v\nwant one QEMU and its virtiofsd", procs)
	}
	if err := unix.Kill(qemu[0].pid, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
}
