package microvm

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A VM's host processes die with hutch (S4) through a reaper each. A
// parent-death signal on QEMU itself does not hold: the kernel clears it
// when a process changes its ids, which QEMU does for -runas once it has
// opened its files; nor can the guest be relied on to power off when
// the agent's connection ends (a hostile one does not, a stuck one
// cannot). So QEMU, and each virtiofsd, is the only child of a reaper:
// hutch's own binary (ReaperCommand), started as PID 1 of a new PID
// namespace with a parent-death signal it keeps, since it never changes
// its ids. When hutch ends — the reaper's link to it reads EOF, or the
// parent-death signal comes — the reaper kills its child, removes the
// VM's directory (for QEMU's), and exits; the death of a PID namespace's
// init kills every process in the namespace, whatever its ids, so
// nothing of the VM outlives the reaper even if it is killed outright.
// The reaper exits with its child's exit code (128 and the signal's
// number for a signal), so that the reaper's end is QEMU's.
//
// The reaper's command line is
//
//	PROGRAM microvm-reaper [-dir DIR] N PATH ARGV0 ARGS...
//
// with the child's files 3 to 3+N-1 at the same numbers and the link to
// hutch, a unix socket, at 3+N: the reaper writes "ok\n" on it once the
// child started, or why it did not.

// reaperGrace bounds how long a reaper whose hutch ended waits for its
// child, killed, before it exits anyway (its namespace's end kills what
// is left).
const reaperGrace = 10 * time.Second

// reaperAnswer bounds how long startReaped waits for the reaper to say
// that its child started: an exec of hutch's binary and a fork, a minute
// on the busiest machine.
const reaperAnswer = time.Minute

// ReaperMain is `microvm-reaper`, which runs only as PID 1 of a PID
// namespace of its own (startReaped).
func ReaperMain(args []string, stderr io.Writer) int {
	if os.Getpid() != 1 {
		fmt.Fprintf(stderr, "hutch: %s: runs only as the reaper of hutch's microVM processes\n", ReaperCommand)
		return 2
	}
	dir, hostUmask, bad := "", -1, false
options:
	for len(args) >= 2 {
		switch args[0] {
		case "-dir":
			dir = args[1]
		case "-hostwrites":
			u, err := strconv.ParseUint(args[1], 8, 32)
			bad = bad || err != nil || u > 0o777
			hostUmask = int(u)
		default:
			break options
		}
		args = args[2:]
	}
	n, err := 0, error(nil)
	if len(args) >= 3 {
		n, err = strconv.Atoi(args[0])
	}
	if bad || len(args) < 3 || err != nil || n < 0 || n > 64 {
		fmt.Fprintf(stderr, "hutch: %s: usage: %s [-dir DIR] [-hostwrites UMASK] N PATH ARGV0 ARGS...\n", ReaperCommand, ReaperCommand)
		return 2
	}
	// Named as ps shows it (started as /proc/self/exe, it would be
	// "exe").
	_ = os.WriteFile("/proc/self/comm", []byte(ReaperCommand), 0)
	// The parent-death signal (startReaped's) is caught: the reaper ends
	// its child itself, then the directory.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	link := os.NewFile(uintptr(3+n), "link")
	syscall.CloseOnExec(3 + n)
	files := make([]*os.File, n)
	for i := range files {
		files[i] = os.NewFile(uintptr(3+i), "file "+strconv.Itoa(3+i))
		syscall.CloseOnExec(3 + i)
	}
	if hostUmask >= 0 {
		// The child is forked from this thread, whose umask and filter
		// it inherits (hostWrites).
		runtime.LockOSThread()
		if err := hostWrites(hostUmask); err != nil {
			fmt.Fprintf(link, "%v\n", err)
			return 127
		}
	}
	c := &exec.Cmd{Path: args[1], Args: args[2:], Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, ExtraFiles: files}
	if err := c.Start(); err != nil {
		fmt.Fprintf(link, "%v\n", err)
		return 127
	}
	for _, f := range files {
		f.Close()
	}
	if _, err := io.WriteString(link, "ok\n"); err != nil {
		// hutch is gone already.
		c.Process.Kill()
		c.Wait()
		removeVMDir(dir)
		return 1
	}
	exited := make(chan struct{})
	go func() {
		c.Wait()
		close(exited)
	}()
	gone := make(chan struct{})
	go func() {
		io.Copy(io.Discard, link)
		close(gone)
	}()
	select {
	case <-exited:
		st := c.ProcessState.Sys().(syscall.WaitStatus)
		if st.Signaled() {
			return 128 + int(st.Signal())
		}
		return st.ExitStatus()
	case <-gone:
	case <-sigs:
	}
	c.Process.Kill()
	select {
	case <-exited:
	case <-time.After(reaperGrace):
	}
	removeVMDir(dir)
	return 1
}

// removeVMDir removes a VM's directory, when it is one: the reaper of a
// VM whose hutch ended removes only what Boot made (ignoring any other
// path it might be given).
func removeVMDir(dir string) {
	if dir == "" || !filepath.IsAbs(dir) {
		return
	}
	if _, err := os.Stat(filepath.Join(dir, "qemu.log")); err != nil {
		return
	}
	os.RemoveAll(dir)
}

// reaped is a process started under a reaper (startReaped).
type reaped struct {
	// cmd is the reaper's command (the process's own without a reaper):
	// killing it ends the process, Wait returns once nothing of it is
	// left.
	cmd *exec.Cmd
	// pid is the process's host pid.
	pid int
	// link is hutch's end of the reaper's link; nil without a reaper.
	link *os.File
}

// startReapedThread is startReaped from an OS thread of its own, locked
// until the reaper has been waited for: done is closed then. A
// parent-death signal is sent when the thread that started the process
// ends, not the process, and a thread ends when a goroutine that locked it
// (to enter a namespace, say: startShares) ends; started from any thread,
// a reaper would end its VM when some later goroutine of hutch's locked
// that thread and ended.
func startReapedThread(c *exec.Cmd, dir string) (p *reaped, done <-chan struct{}, err error) {
	started := make(chan error, 1)
	d := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread() // the reaper is gone then
		var err error
		p, err = startReaped(c, dir)
		started <- err
		if err == nil {
			p.cmd.Wait()
			close(d)
		}
	}()
	if err := <-started; err != nil {
		return nil, nil, err
	}
	return p, d, nil
}

// startReaped starts c (its Path, Args, Env, Stdin, Stdout, Stderr and
// ExtraFiles are used) as the only child of a reaper, PID 1 of a new PID
// namespace, whose parent-death signal is tied to the calling thread,
// which must be locked and outlive the reaper (startReapedThread's, or
// startShares' in its mount namespace). dir, if not "", is the VM's directory, which the reaper
// removes if hutch ends before the process. Without root, which a PID
// namespace needs, c is started itself with a parent-death signal: it
// cannot change its ids then (-runas needs root), so the signal holds.
func startReaped(c *exec.Cmd, dir string) (*reaped, error) {
	var opts []string
	if dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, err
		}
		opts = append(opts, "-dir", abs)
	}
	return startReaper(c, opts)
}

// startReapedHostWrites is startReaped (with no VM directory) for a
// process that writes host files for a guest (the workspace's
// virtiofsd): it starts with umask as its umask and under the filter of
// hostWrites, both set by its reaper before it forks it. It needs root.
func startReapedHostWrites(c *exec.Cmd, umask fs.FileMode) (*reaped, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("microvm: a process writing host files for a guest needs root (its reaper confines it)")
	}
	return startReaper(c, []string{"-hostwrites", strconv.FormatUint(uint64(umask.Perm()), 8)})
}

// startReaper is startReaped with the reaper's options.
func startReaper(c *exec.Cmd, opts []string) (*reaped, error) {
	if os.Geteuid() != 0 {
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setsid: true}
		if err := c.Start(); err != nil {
			return nil, err
		}
		return &reaped{cmd: c, pid: c.Process.Pid}, nil
	}
	// Non-blocking, for a deadline on the reaper's answer (the reaper's
	// end is made blocking as it is passed on).
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("reaper's link: %w", err)
	}
	link, theirs := os.NewFile(uintptr(fds[0]), "reaper link"), os.NewFile(uintptr(fds[1]), "reaper link")
	defer theirs.Close()
	args := append([]string{ReaperCommand}, opts...)
	args = append(append(args, strconv.Itoa(len(c.ExtraFiles)), c.Path), c.Args...)
	r := exec.Command("/proc/self/exe", args...)
	r.Env, r.Stdin, r.Stdout, r.Stderr = c.Env, c.Stdin, c.Stdout, c.Stderr
	r.ExtraFiles = append(slices.Clone(c.ExtraFiles), theirs)
	// SIGTERM, which the reaper catches to end its child and remove dir;
	// SIGKILL ends it too (its namespace with it), as Close does.
	r.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGTERM, Setsid: true}
	if err := r.Start(); err != nil {
		link.Close()
		return nil, fmt.Errorf("reaper: %w", err)
	}
	theirs.Close()
	p := &reaped{cmd: r, link: link}
	// A program that does not dispatch ReaperCommand never answers.
	link.SetReadDeadline(time.Now().Add(reaperAnswer))
	line, err := bufio.NewReader(link).ReadString('\n')
	if line != "ok\n" {
		p.kill()
		if line = strings.TrimSpace(line); line == "" {
			line = fmt.Sprintf("the reaper ended (%v, %v)", err, r.ProcessState)
		}
		return nil, errors.New(line)
	}
	if p.pid, err = reapedChild(r.Process.Pid); err != nil {
		p.kill()
		return nil, err
	}
	return p, nil
}

// kill ends the process (its reaper, and so its PID namespace), waits for
// it and closes the link.
func (p *reaped) kill() {
	p.cmd.Process.Kill()
	p.cmd.Wait()
	p.close()
}

// close closes hutch's end of the link, once the reaper ended.
func (p *reaped) close() {
	if p.link != nil {
		p.link.Close()
	}
}

// exitCode is the process's exit code once p.cmd was waited for: -1 when
// a signal ended it, or its reaper.
func (p *reaped) exitCode() int {
	code := p.cmd.ProcessState.ExitCode()
	if p.link != nil && code >= 128 {
		return -1
	}
	return code
}

// reapedChild is the host pid of the reaper's only child: its threads'
// children (the thread that forked a process lists it).
func reapedChild(reaper int) (int, error) {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", reaper))
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			return strconv.Atoi(f[0])
		}
	}
	return 0, fmt.Errorf("reaper %d: its child is not listed in /proc/%d/task/*/children", reaper, reaper)
}
