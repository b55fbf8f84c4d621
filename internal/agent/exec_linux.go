package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// defaultPath is searched for commands when their environment has no PATH.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// process is a command the agent started.
type process struct {
	pid     int
	args    []string
	started time.Time
	tty     *os.File // the pty's master; nil without a terminal
	stdin   *os.File // the command's stdin (a pipe, or the master); nil without stdin
	outs    []*os.File

	exited   chan struct{} // closed once status is set
	reported chan struct{} // closed once its exit frame is sent (exec)

	mu       sync.Mutex
	done     bool // reaped: its pid may belong to someone else now
	status   syscall.WaitStatus
	timedOut bool
}

// setExit records the status the process ended with.
func (p *process) setExit(ws syscall.WaitStatus) {
	p.mu.Lock()
	if p.done {
		p.mu.Unlock()
		return
	}
	p.done, p.status = true, ws
	p.mu.Unlock()
	close(p.exited)
}

// kill sends sig to the process's group (its session: it called setsid),
// unless it was reaped.
func (p *process) kill(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return errorf(CodeNotFound, "signal process %d: it has exited", p.pid)
	}
	if err := unix.Kill(-p.pid, sig); err != nil {
		return fmt.Errorf("signal process %d: %w", p.pid, err)
	}
	return nil
}

// timeout kills the process's group for running too long.
func (p *process) timeout() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.done && unix.Kill(-p.pid, syscall.SIGKILL) == nil {
		p.timedOut = true
	}
}

func (p *process) exitMsg() exitMsg {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := exitMsg{TimedOut: p.timedOut}
	switch {
	case p.status.Exited():
		m.Code = p.status.ExitStatus()
	case p.status.Signaled():
		m.Signal = int(p.status.Signal())
		m.Code = 128 + m.Signal
	}
	return m
}

// procTable waits for the agent's children. Without PID1 every command has
// a goroutine blocked in wait4 for its own pid. With PID1 one reaper, woken
// by SIGCHLD, collects every child that ended (wait4(-1)), routes the
// statuses of commands to them and drops those of orphans; nothing else in
// the process may wait for children.
type procTable struct {
	pid1 bool
	log  *slog.Logger

	// startMu is held for reading from a fork until its process is
	// registered, and for writing by the reaper while it looks a pid up: a
	// command that ends before ForkExec returned is still found.
	startMu sync.RWMutex
	mu      sync.Mutex
	byPID   map[int]*process

	// oomBase is the agent's own OOM score adjustment. As PID 1 it starts
	// its commands at commandOOMAdj, above it, so that at the sandbox's
	// memory limit the kernel's OOM killer takes a command, not the agent,
	// whose end would end the sandbox (what a command writes into a tmpfs
	// counts against the limit, not against the command's own size, so
	// the agent can be the largest process). A process may raise its own
	// value, and lower it back to where it was, without privilege: around
	// each fork the agent raises its own, and lowers it back after.
	oomBase int
	oomMu   sync.Mutex

	sigs chan os.Signal
	stop chan struct{}
	done chan struct{}
}

func newProcTable(pid1 bool, log *slog.Logger) (*procTable, error) {
	t := &procTable{pid1: pid1, log: log, oomBase: readOOMAdj()}
	if pid1 {
		t.byPID = make(map[int]*process)
		t.sigs = make(chan os.Signal, 16)
		t.stop = make(chan struct{})
		t.done = make(chan struct{})
		signal.Notify(t.sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
		go t.reaper()
	}
	return t, nil
}

// close stops the reaper.
func (t *procTable) close() {
	if t.pid1 {
		signal.Stop(t.sigs)
		close(t.stop)
		<-t.done
	}
}

func (t *procTable) reaper() {
	defer close(t.done)
	t.reapAll() // children that ended before the handler was installed
	for {
		select {
		case sig := <-t.sigs:
			if sig == syscall.SIGCHLD {
				t.reapAll()
			} else {
				t.log.Info("agent ignores signal", "signal", sig.String())
			}
		case <-t.stop:
			t.reapAll()
			return
		}
	}
}

// reapAll collects every child that has ended.
func (t *procTable) reapAll() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		t.startMu.Lock()
		t.mu.Lock()
		p := t.byPID[pid]
		delete(t.byPID, pid)
		t.mu.Unlock()
		t.startMu.Unlock()
		if p != nil {
			p.setExit(ws)
		} else {
			t.log.Debug("reaped orphan", "pid", pid)
		}
	}
}

// commandOOMAdj is the OOM score adjustment a served sandbox's commands
// start with (see procTable.oomBase).
const commandOOMAdj = 500

// readOOMAdj is the agent's own OOM score adjustment; commandOOMAdj when
// it cannot be read (commands then start with the agent's).
func readOOMAdj() int {
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return commandOOMAdj
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return commandOOMAdj
	}
	return n
}

// setOOMAdj sets the agent's own OOM score adjustment.
func setOOMAdj(v int) error {
	return os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(v)), 0)
}

// fork starts p and registers it with the reaper.
func (t *procTable) fork(path string, attr *syscall.ProcAttr, p *process) error {
	t.startMu.RLock()
	defer t.startMu.RUnlock()
	if t.pid1 && t.oomBase < commandOOMAdj {
		t.oomMu.Lock()
		defer t.oomMu.Unlock()
		if err := setOOMAdj(commandOOMAdj); err == nil {
			defer func() { _ = setOOMAdj(t.oomBase) }()
		}
	}
	pid, err := syscall.ForkExec(path, p.args, attr)
	if err != nil {
		return err
	}
	p.pid = pid
	if t.pid1 {
		t.mu.Lock()
		t.byPID[pid] = p
		t.mu.Unlock()
	}
	return nil
}

// wait waits for p without a reaper.
func (t *procTable) wait(p *process) {
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(p.pid, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			t.log.Error("wait for command", "pid", p.pid, "err", err)
			ws = syscall.WaitStatus(255 << 8)
		}
		break
	}
	p.setExit(ws)
}

// exec runs a command: it answers with the pid once the command runs, then
// streams its output and sends its exit.
func (s *server) exec(r *areq, m *request) {
	p, err := s.start(m)
	if err != nil {
		s.replyErr(r.id, err)
		return
	}
	s.log.Debug("command started", "pid", p.pid, "cmd", p.args[0])
	if !s.procs.pid1 {
		s.spawn(func() { s.procs.wait(p) })
	}
	s.mu.Lock()
	r.proc = p
	s.mu.Unlock()

	// The request's context ends when the daemon cancels the exec or Serve
	// returns: then the command's group dies and its streams close. As
	// PID 1, when Serve returns, what is left of the group dies even if the
	// command itself ended: every process around is the sandbox's, and a
	// reused pid can only be another command's, which dies too.
	stopKill := context.AfterFunc(r.ctx, func() {
		if p.kill(syscall.SIGKILL) != nil && s.procs.pid1 && s.ctx.Err() != nil {
			_ = unix.Kill(-p.pid, syscall.SIGKILL)
		}
		for _, f := range p.outs {
			f.Close()
		}
		if p.stdin != nil {
			_ = p.stdin.SetWriteDeadline(time.Now())
		}
	})
	defer stopKill()
	if d := time.Duration(m.Timeout); d > 0 {
		t := time.AfterFunc(d, p.timeout)
		defer t.Stop()
	}

	s.reply(r.id, response{PID: p.pid}, nil)

	pumps := make([]*outPump, len(p.outs))
	for i, f := range p.outs {
		pumps[i] = &outPump{f: f, stream: streamOut + byte(i)}
		s.startPump(r, pumps[i])
	}
	stopIn := make(chan struct{})
	var feeder sync.WaitGroup
	if r.in != nil {
		feeder.Add(1)
		go func() {
			defer feeder.Done()
			s.feed(r, p, stopIn)
		}()
	}

	<-p.exited
	// Everything the command wrote before it ended is sent before its
	// exit: a stream whose end does not come within the grace (a
	// background process holds it, or the machine is busy) is paused and
	// read to what it holds now, then resumed for what may follow.
	grace := time.NewTimer(exitGrace)
	if !pumpsEnded(r.ctx, pumps, grace.C) {
		for _, o := range pumps {
			_ = o.f.SetReadDeadline(time.Now())
		}
		if pumpsEnded(r.ctx, pumps, nil) {
			for _, o := range pumps {
				if o.paused {
					s.drain(r, o)
				}
			}
		}
	}
	grace.Stop()
	em := p.exitMsg()
	s.log.Debug("command ended", "pid", p.pid, "code", em.Code, "timed_out", em.TimedOut)
	_ = s.sendJSON(frameExit, r.id, em)
	close(p.reported)

	// Like os/exec, stop feeding stdin once the command is gone.
	close(stopIn)
	if p.stdin != nil {
		_ = p.stdin.SetWriteDeadline(time.Now())
	}
	feeder.Wait()
	if p.stdin != nil && p.tty == nil {
		p.stdin.Close()
	}
	for _, o := range pumps {
		if o.paused && !o.ended {
			_ = o.f.SetReadDeadline(time.Time{})
			s.startPump(r, o)
		}
	}
	pumpsEnded(r.ctx, pumps, nil)
	for _, f := range p.outs {
		f.Close()
	}
}

// outPump forwards one output stream of a command.
type outPump struct {
	f      *os.File
	stream byte
	done   chan struct{} // closed when the pump returns
	paused bool          // it returned because its read deadline passed
	ended  bool          // the stream reached its end (sent)
}

// startPump forwards o's stream until its end, or until its read
// deadline passes (paused).
func (s *server) startPump(r *areq, o *outPump) {
	o.done, o.paused = make(chan struct{}), false
	go func() {
		defer close(o.done)
		_, err := s.pump(r, o.stream, o.f, true)
		switch {
		case err == nil:
			o.ended = true
			_ = s.send(encodeFrame(frameEOF, o.stream, r.id, nil))
		case errors.Is(err, os.ErrDeadlineExceeded):
			o.paused = true
		}
	}()
}

// pumpsEnded waits until every pump has returned; false when timeout (nil
// for none) or ctx comes first.
func pumpsEnded(ctx context.Context, pumps []*outPump, timeout <-chan time.Time) bool {
	for _, o := range pumps {
		select {
		case <-o.done:
		case <-timeout:
			return false
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// drain sends what o's stream holds now, without waiting for more: a read
// that would block ends it. The stream's end, if it comes, is sent too.
func (s *server) drain(r *areq, o *outPump) {
	rc, err := o.f.SyscallConn()
	if err != nil {
		return
	}
	cr := r.out[o.stream]
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	for {
		avail, err := cr.wait(r.ctx)
		if err != nil {
			return
		}
		var n int
		var rerr error
		// Control, not Read: the pause's deadline has passed, and the
		// descriptor is non-blocking, so this read returns at once.
		if err := rc.Control(func(fd uintptr) {
			n, rerr = unix.Read(int(fd), buf[prefixSize:prefixSize+min(avail, maxChunk)])
		}); err != nil {
			return
		}
		switch {
		case n > 0:
			cr.spend(n)
			s.outRead.Add(int64(n))
			putPrefix(buf, frameData, o.stream, r.id, n)
			if s.send(buf[:prefixSize+n]) != nil {
				return
			}
		case rerr == nil || rerr == unix.EIO:
			o.ended = true
			_ = s.send(encodeFrame(frameEOF, o.stream, r.id, nil))
			return
		default:
			return // EAGAIN: nothing more for now
		}
	}
}

// feed copies the daemon's stdin data to the command, granting credit for
// what the command took.
func (s *server) feed(r *areq, p *process, stop <-chan struct{}) {
	for {
		b, eof, err := r.in.pop(r.ctx, stop)
		if err != nil {
			return
		}
		if eof {
			if p.tty != nil {
				_, _ = p.stdin.Write([]byte{4}) // ^D: end of file for the terminal's reader
			} else {
				p.stdin.Close()
			}
			return
		}
		if _, err := p.stdin.Write(b); err != nil {
			// The command closed its stdin or ended: tell the client.
			r.in.drop()
			_ = s.send(encodeFrame(frameEOF, streamIn, r.id, nil))
			return
		}
		if err := s.send(creditFrame(streamIn, r.id, len(b))); err != nil {
			return
		}
	}
}

// start resolves and forks the command of m.
func (s *server) start(m *request) (*process, error) {
	args := fromWire(m.Args)
	if len(args) == 0 || args[0] == "" {
		return nil, errorf(CodeInvalid, "exec: no command")
	}
	env := mergeEnv(s.opts.DefaultEnv, fromWire(m.Env))
	for _, a := range append(slices.Clip(args), env...) {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, errorf(CodeInvalid, "exec %s: argument or environment contains NUL", args[0])
		}
	}
	if m.Timeout < 0 {
		return nil, errorf(CodeInvalid, "exec %s: negative timeout", args[0])
	}
	if m.TTY && !hasVar(env, "TERM") {
		env = append(env, "TERM=xterm-256color")
	}
	dir := string(m.Dir)
	if dir == "" {
		dir = s.opts.DefaultDir
	}
	if dir == "" {
		dir = "/"
	}
	if e := checkPath("chdir", dir); e != nil {
		return nil, e
	}
	if fi, err := os.Stat(dir); err != nil {
		return nil, pathError("chdir", dir, err)
	} else if !fi.IsDir() {
		return nil, errorf(CodeNotDir, "chdir %s: not a directory", dir)
	}
	path, err := lookPath(args[0], env, dir)
	if err != nil {
		return nil, err
	}

	p := &process{args: args, started: time.Now(), exited: make(chan struct{}), reported: make(chan struct{})}
	var child []*os.File // the command's ends, closed here once it runs
	defer func() {
		for _, f := range child {
			f.Close()
		}
	}()
	fail := func(err error) (*process, error) {
		for _, f := range p.outs {
			f.Close()
		}
		if p.stdin != nil && p.tty == nil {
			p.stdin.Close()
		}
		return nil, err
	}
	var fds []uintptr
	if m.TTY {
		master, slave, err := openPTY(m.Rows, m.Cols)
		if err != nil {
			return nil, toError(err)
		}
		child = append(child, slave)
		p.tty, p.outs = master, []*os.File{master}
		if m.Stdin {
			p.stdin = master
		}
		fd := slave.Fd()
		fds = []uintptr{fd, fd, fd}
	} else {
		var in *os.File
		if m.Stdin {
			pr, pw, err := os.Pipe()
			if err != nil {
				return nil, toError(fmt.Errorf("stdin pipe: %w", err))
			}
			in, p.stdin = pr, pw
		} else if in, err = os.Open(os.DevNull); err != nil {
			return nil, toError(err)
		}
		child = append(child, in)
		fds = append(fds, in.Fd())
		for range 2 {
			pr, pw, err := os.Pipe()
			if err != nil {
				return fail(toError(fmt.Errorf("output pipe: %w", err)))
			}
			child = append(child, pw)
			p.outs = append(p.outs, pr)
			fds = append(fds, pw.Fd())
		}
	}
	attr := &syscall.ProcAttr{
		Dir:   dir,
		Env:   env,
		Files: fds,
		Sys:   &syscall.SysProcAttr{Setsid: true, Setctty: m.TTY, Ctty: 0},
	}
	if (m.UID == nil) != (m.GID == nil) {
		return fail(errorf(CodeInvalid, "exec %s: a uid without a gid or a gid without a uid", args[0]))
	}
	if m.UID != nil {
		attr.Sys.Credential = &syscall.Credential{Uid: *m.UID, Gid: *m.GID, Groups: []uint32{}}
	}
	err = s.procs.fork(path, attr, p)
	if err == syscall.EPERM && m.UID != nil {
		// A user namespace whose setgroups is denied: keep the groups.
		attr.Sys.Credential.NoSetGroups = true
		err = s.procs.fork(path, attr, p)
	}
	if err != nil {
		return fail(execError(args[0], err))
	}
	return p, nil
}

// execError reports why the command could not be executed: as a shell
// would, not found (exit code 127) or not executable (126).
func execError(cmd string, err error) *Error {
	var errno syscall.Errno
	errors.As(err, &errno)
	switch errno {
	case syscall.ENOENT, syscall.ENOTDIR:
		return errorf(CodeNotFound, "%s: command not found", cmd)
	case syscall.EACCES, syscall.EPERM, syscall.EISDIR:
		return errorf(CodePermissionDenied, "%s: permission denied", cmd)
	case syscall.ENOEXEC:
		return errorf(CodePermissionDenied, "%s: exec format error", cmd)
	case syscall.E2BIG:
		return errorf(CodeTooLarge, "%s: argument list too long", cmd)
	}
	return errorf(CodeInternal, "exec %s: %v", cmd, err)
}

// lookPath finds cmd as a shell would: a name with a slash is a path
// (relative to dir), any other is searched in the PATH of env, where
// directories (and what cannot be reached) count as absent, and a file that
// may not be executed makes the result "permission denied" if nothing
// better is found.
func lookPath(cmd string, env []string, dir string) (string, error) {
	if strings.Contains(cmd, "/") {
		p := cmd
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := executable(p); err != nil {
			return "", execError(cmd, err)
		}
		return p, nil
	}
	pathVar, ok := lookupVar(env, "PATH")
	if !ok {
		pathVar = defaultPath
	}
	denied := false
	for _, d := range filepath.SplitList(pathVar) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, cmd)
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		fi, err := os.Stat(p)
		if err != nil || fi.IsDir() {
			continue
		}
		if mayExec(p) == nil {
			return p, nil
		}
		denied = true
	}
	if denied {
		return "", errorf(CodePermissionDenied, "%s: permission denied", cmd)
	}
	return "", errorf(CodeNotFound, "%s: command not found", cmd)
}

// executable checks that p is a file the agent may execute.
func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return syscall.EISDIR
	}
	return mayExec(p)
}

// mayExec checks that the agent may execute p, which exists.
func mayExec(p string) error {
	return unix.Faccessat(unix.AT_FDCWD, p, unix.X_OK, unix.AT_EACCESS)
}

// mergeEnv returns base with the entries of over added, each replacing the
// entry of base with its name.
func mergeEnv(base, over []string) []string {
	out := make([]string, 0, len(base)+len(over))
	idx := make(map[string]int, len(base)+len(over))
	for _, kv := range slices.Concat(base, over) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}

func lookupVar(env []string, name string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == name {
			return v, true
		}
	}
	return "", false
}

func hasVar(env []string, name string) bool {
	_, ok := lookupVar(env, name)
	return ok
}

// openPTY opens a new pty of rows×cols (24×80 if 0) and returns its master,
// non-blocking for the runtime's poller, and its other end.
func openPTY(rows, cols uint16) (master, slave *os.File, err error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("unlock pty: %w", err)
	}
	if rows == 0 {
		rows = 24
	}
	if cols == 0 {
		cols = 80
	}
	if err := unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("set pty size: %w", err)
	}
	sfd, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if errno == 0 {
		slave = os.NewFile(sfd, "pty")
	} else {
		// Kernels before 4.13: open the pty by its name.
		n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
		if err != nil {
			unix.Close(fd)
			return nil, nil, fmt.Errorf("pty number: %w", err)
		}
		name := "/dev/pts/" + strconv.FormatUint(uint64(n), 10)
		s, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			unix.Close(fd)
			return nil, nil, fmt.Errorf("open %s: %w", name, err)
		}
		slave = os.NewFile(uintptr(s), name)
	}
	return os.NewFile(uintptr(fd), "ptmx"), slave, nil
}

// truncateArgs returns the first arguments of args, up to max bytes in all,
// the last one cut if need be.
func truncateArgs(args []string, max int) []string {
	var out []string
	for _, a := range args {
		if len(a) > max {
			out = append(out, a[:max])
			break
		}
		out = append(out, a)
		max -= len(a)
	}
	return out
}

// procOf returns the process of exec request id.
func (s *server) procOf(id uint32) *process {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.reqs[id]; r != nil {
		return r.proc
	}
	return nil
}

func (s *server) signal(target uint32, sig int) error {
	if sig < 0 || sig > 64 {
		return errorf(CodeInvalid, "signal %d: out of range", sig)
	}
	p := s.procOf(target)
	if p == nil {
		return errorf(CodeNotFound, "signal: no process for request %d", target)
	}
	return p.kill(syscall.Signal(sig))
}

func (s *server) resize(target uint32, rows, cols uint16) error {
	p := s.procOf(target)
	if p == nil {
		return errorf(CodeNotFound, "resize: no process for request %d", target)
	}
	if p.tty == nil {
		return errorf(CodeInvalid, "resize process %d: it has no terminal", p.pid)
	}
	rc, err := p.tty.SyscallConn()
	if err != nil {
		return fmt.Errorf("resize process %d: %w", p.pid, err)
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}); err != nil {
		return fmt.Errorf("resize process %d: %w", p.pid, err)
	}
	if ierr != nil {
		return fmt.Errorf("resize process %d: %w", p.pid, ierr)
	}
	return nil
}

// ps lists the commands still running, oldest first.
func (s *server) ps() []wireProc {
	s.mu.Lock()
	var ps []*process
	for _, r := range s.reqs {
		if r.proc != nil {
			ps = append(ps, r.proc)
		}
	}
	s.mu.Unlock()
	out := make([]wireProc, 0, len(ps))
	for _, p := range ps {
		p.mu.Lock()
		done := p.done
		p.mu.Unlock()
		if !done {
			out = append(out, wireProc{PID: p.pid, Args: toWire(truncateArgs(p.args, maxPSArgs)), Started: p.started.UnixNano()})
		}
	}
	slices.SortFunc(out, func(a, b wireProc) int {
		return cmp.Or(cmp.Compare(a.Started, b.Started), cmp.Compare(a.PID, b.PID))
	})
	return out
}
