//go:build linux

package escape

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestItem11_ForkBomb: with --pids 64 a program that starts 500 processes
// gets fewer than 64 (EAGAIN), and a shell fork bomb is contained: hutch
// returns on its timeout and every process of the bomb is gone (S4).
func TestItem11_ForkBomb(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		a := sb.attacker()
		r := sb.run(opts{flags: []string{"--pids", "64"}}, a+" forkbomb:500")
		res := attacks(r.stdout)["forkbomb:500"]
		var n int
		if _, err := fmt.Sscanf(res, "EAGAIN forked=%d", &n); err != nil || n >= 64 || n < 1 {
			t.Errorf("want EAGAIN after fewer than 64 processes, got %q\n%s", res, r)
		}

		marker, flags := markerFlags()
		r = sb.run(opts{flags: append(flags, "--pids", "64", "--timeout", "3s"), deadline: 3 * time.Minute},
			`b() { b | b & }; b; sleep 100`)
		if r.code != 124 {
			t.Logf("the bomb ended with %d before the timeout", r.code)
		}
		waitNoMarked(t, marker)
	})
}

// memoryEnforcedByCgroup is printed by the memory test's script when the
// sandbox's data size is unlimited: the memory limit is a cgroup's then,
// not an rlimit.
const memoryEnforcedByCgroup = "Max data size unlimited"

// TestItem11_MemoryBomb: with --memory 64m, allocating 16 MiB works (the
// control) while allocating 1 GiB is stopped. Under a cgroup the kernel
// kills the allocating process and hutch reports that the sandbox ran out
// of memory; under the rlimit fallback (no cgroup, e.g. an unprivileged
// user without delegation) the allocation fails. Either way hutch's own
// init survives and the command goes on (S4, S7).
func TestItem11_MemoryBomb(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		a := sb.attacker()
		script := fmt.Sprintf(`
echo begin
grep "Max data size" /proc/self/limits | awk '{print "Max data size", $4}'
%[1]s alloc:16
%[1]s alloc:1024; echo "RC bomb $?"
sleep 0.2
echo end
`, a)
		r := sb.run(opts{flags: []string{"--memory", "64m"}}, script)
		if sb.gvisor() {
			// Under gVisor the limit is the cgroup around the Sentry:
			// exceeding it ends the whole sandbox (ARCHITECTURE, The
			// gVisor tier, Limits), never allocating the gigabyte.
			if r.code != 137 || !strings.Contains(r.stdout, "alloc:16 ok") || strings.Contains(r.stdout, "alloc:1024 ok") || strings.Contains(r.stdout, "RC bomb 0") {
				t.Errorf("under gVisor, want the control allocated and the sandbox ended (137) by the bomb\n%s", r)
			}
			return
		}
		if !strings.Contains(r.stdout, "end") {
			t.Errorf("the sandbox died before its command finished (hutch exit %d, no message from hutch): "+
				"the memory limit must stop the bomb, not hutch's own init\n%s", r.code, r)
		}
		if !strings.Contains(r.stdout, "alloc:16 ok") {
			t.Errorf("control failed: 16 MiB could not be allocated under a 64 MiB limit\n%s", r)
		}
		if strings.Contains(r.stdout, "alloc:1024 ok") || strings.Contains(r.stdout, "RC bomb 0") {
			t.Errorf("1 GiB was allocated under a 64 MiB limit\n%s", r)
		}
		if strings.Contains(r.stdout, memoryEnforcedByCgroup) {
			if !strings.Contains(r.stdout, "RC bomb 137") || !strings.Contains(r.stderr, "ran out of memory") {
				t.Errorf("under a cgroup, want the bomb killed (137) and hutch to report it\n%s", r)
			}
		} else {
			t.Logf("%s: memory limited by RLIMIT_DATA, not a cgroup", sb.mode.name)
		}
	})
}

// TestItem11_FillTmp: with --tmp-size 8m, filling /tmp or /dev/shm stops
// with ENOSPC at 8 MiB, while a 1 MiB file fits (the control). The host's
// /tmp gets none of it (S7). The workspace has no size limit: hutch sets
// no quota on host directories.
func TestItem11_FillTmp(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		a := sb.attacker()
		name := randomName("hutch-fill-")
		r := sb.run(opts{flags: []string{"--tmp-size", "8m"}},
			fmt.Sprintf("%[1]s fillfile:/tmp/small,1 fillfile:/tmp/%[2]s,64 fillfile:/dev/shm/%[2]s,64", a, name))
		if got := attacks(r.stdout)["fillfile:/tmp/small,1"]; got != "ok written_mib=1" {
			t.Errorf("control failed: a 1 MiB file in /tmp: %q\n%s", got, r)
		}
		for _, dir := range []string{"/tmp/", "/dev/shm/"} {
			got := attacks(r.stdout)["fillfile:"+dir+name+",64"]
			var n int
			if _, err := fmt.Sscanf(got, "ENOSPC written_mib=%d", &n); err != nil || n > 8 {
				t.Errorf("filling %s: want ENOSPC within 8 MiB, got %q\n%s", dir, got, r)
			}
			if exists(dir + name) {
				t.Errorf("the sandbox's file appeared in the host's %s", dir)
			}
		}
	})
}

// TestItem11_Output: a gigabyte written to /dev/null is fine, and hundreds
// of megabytes written to hutch's stdout (a pipe) or through its terminal
// relay (a pty) all arrive while hutch's memory stays bounded (S7).
func TestItem11_Output(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		// In 1 MiB blocks: head's 8 KiB ones made a quarter of a million
		// system calls, minutes under gVisor on a busy machine.
		r := sb.run(opts{}, "dd if=/dev/zero of=/dev/null bs=1M count=1024 2>/dev/null && echo done")
		if r.code != 0 || r.stdout != "done\n" {
			t.Errorf("1 GiB to /dev/null\n%s", r)
		}

		const pipeBytes = 256 << 20
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan int64, 1)
		go func() { got <- drain(pr); pr.Close() }()
		r = sb.run(opts{stdout: pw}, "head -c "+strconv.Itoa(pipeBytes)+" /dev/zero")
		pw.Close()
		if n := <-got; r.code != 0 || n != pipeBytes {
			t.Errorf("stdout pipe: got %d of %d bytes, exit %d\n%s", n, pipeBytes, r.code, r)
		}
		checkRSS(t, r)

		const ptyBytes = 32 << 20
		master, slave := openPty(t)
		buf := &syncBuffer{}
		done := make(chan struct{})
		go func() { buf.count(master); close(done) }()
		r = sb.run(opts{stdin: slave, stdout: slave, stderr: slave}, "head -c "+strconv.Itoa(ptyBytes)+" /dev/zero")
		buf.waitCount(ptyBytes)
		slave.Close()
		<-done
		if n := buf.n.Load(); r.code != 0 || n < ptyBytes {
			t.Errorf("pty relay: got %d of %d bytes, exit %d", n, ptyBytes, r.code)
		}
		checkRSS(t, r)
	})
}

// checkRSS fails the test if hutch (or a process it waited for) peaked
// above 100 MiB of resident memory.
func checkRSS(t *testing.T, r result) {
	t.Helper()
	if r.maxRSSKiB > 100<<10 {
		t.Errorf("S7: hutch's peak RSS was %d KiB while relaying output; want it bounded (< 100 MiB)", r.maxRSSKiB)
	}
}
