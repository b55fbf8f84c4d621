package microvm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestReaped: a process under a reaper (this test binary, MainIfReaper) is
// the reaper's child with the pid startReaped reports, gets the files
// passed to it, and its exit code is the reaper's (-1 for a kill, of the
// process or of the reaper); a reaper whose link to hutch ends kills its
// child and removes the VM's directory it was given. No VM is booted.
func TestReaped(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "passed"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// It waits for its input (the test's end of a pipe) to end, so that
	// its pids can be read while it runs.
	c := exec.Command("/bin/sh", "-c", `echo "$$ $PPID" >&3; read x; exit 7`)
	c.ExtraFiles = []*os.File{f}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	c.Stdin = pr
	p, err := startReaped(c, "")
	pr.Close()
	if err != nil {
		t.Fatal(err)
	}
	// The child's pids, the host's then the reaper's namespace's, read
	// before it is reaped.
	nspid := ""
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid)); err == nil {
		for _, l := range strings.Split(string(st), "\n") {
			if v, ok := strings.CutPrefix(l, "NSpid:"); ok {
				nspid = strings.Join(strings.Fields(v), " ")
			}
		}
	}
	pw.Close()
	p.cmd.Wait()
	p.close()
	if got := p.exitCode(); got != 7 {
		t.Errorf("exit code %d, want the child's, 7", got)
	}
	b, _ := os.ReadFile(f.Name())
	// The child's own pid and its parent's, in the reaper's namespace.
	self, parent, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
	if parent != "1" || nspid != strconv.Itoa(p.pid)+" "+self {
		t.Errorf("the child wrote %q on its file 3, its NSpid %q, startReaped's pid %d: want the reaper, 1, as its parent and its pid in the reaper's namespace under the pid startReaped gave", b, nspid, p.pid)
	}

	// Killed: the child (by its host pid), then the reaper.
	p, err = startReaped(exec.Command("/bin/sleep", "600"), "")
	if err != nil {
		t.Fatal(err)
	}
	if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p.pid)); string(comm) != "sleep\n" {
		t.Fatalf("pid %d is %q, want the reaped sleep", p.pid, comm)
	}
	if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p.cmd.Process.Pid)); string(comm) != ReaperCommand+"\n" {
		t.Errorf("the reaper's name is %q, want %q", comm, ReaperCommand)
	}
	proc, _ := os.FindProcess(p.pid)
	proc.Kill()
	p.cmd.Wait()
	p.close()
	if got := p.exitCode(); got != -1 {
		t.Errorf("exit code %d after the child was killed, want -1", got)
	}
	p, err = startReaped(exec.Command("/bin/sleep", "600"), "")
	if err != nil {
		t.Fatal(err)
	}
	child := p.pid
	p.kill()
	if got := p.exitCode(); got != -1 {
		t.Errorf("exit code %d after the reaper was killed, want -1", got)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(child)); err == nil {
		t.Errorf("the reaper was killed and waited for, its child %d still exists", child)
	}

	// The link ends (hutch gone): the child is killed, the directory
	// removed.
	vmDir := filepath.Join(dir, "vm")
	if err := os.Mkdir(vmDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vmDir, "qemu.log"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p, err = startReaped(exec.Command("/bin/sleep", "600"), vmDir)
	if err != nil {
		t.Fatal(err)
	}
	p.link.Close()
	p.cmd.Wait()
	if p.cmd.ProcessState.ExitCode() != 1 {
		t.Errorf("the reaper whose link ended: %v, want exit code 1", p.cmd.ProcessState)
	}
	if _, err := os.Stat(vmDir); !os.IsNotExist(err) {
		t.Errorf("the VM's directory after the reaper's link ended: %v", err)
	}
}
