package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// SudoSocket is the abstract unix socket (of the sandbox's own network
// namespace) on which an agent with ServeOptions.Sudo runs commands as
// root for `sudo`. The agent binds it before any code of the sandbox runs,
// so nothing else can hold the name.
const SudoSocket = "@hutch-sudo"

// SudoMarker is the file whose presence in the sandbox's root makes Main
// serve sudo: hutch's base image holds it (scripts/base-image.sh).
const SudoMarker = "/etc/hutch/sudo"

// sudoAddr is SudoSocket (tests change it).
var sudoAddr = SudoSocket

// sudoPath is the PATH sudo runs commands with (Debian's secure_path).
const sudoPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Bounds of what a sandbox's process may ask of PID 1 through sudo.
const (
	maxSudoRequest = 128 << 10 // one request: arguments, environment, directory
	maxSudoConns   = 32        // commands run through sudo at once
)

// sudoRequest is the one message a sudo client sends, with its standard
// input, output and error as SCM_RIGHTS.
type sudoRequest struct {
	Args []string `json:"args"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"`
	// KeepEnv is -E: the client's environment, not sudo's reset one.
	KeepEnv bool `json:"keep_env,omitempty"`
	// Home is -H/-i: HOME is root's (it is without -E anyway).
	Home bool `json:"home,omitempty"`
	// Set are the NAME=VALUE assignments given before the command.
	Set []string `json:"set,omitempty"`
}

// sudoReply is the agent's one answer, once the command ended (or could
// not start).
type sudoReply struct {
	Code  int    `json:"code"`
	Error string `json:"error,omitempty"`
}

// serveSudo accepts sudo's clients until the server's context ends.
func (s *server) serveSudo() error {
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sudoAddr, Net: "unixpacket"})
	if err != nil {
		return fmt.Errorf("sudo: listen on %s: %w", SudoSocket, err)
	}
	s.spawn(func() {
		<-s.ctx.Done()
		l.Close()
	})
	slots := make(chan struct{}, maxSudoConns)
	s.spawn(func() {
		for {
			c, err := l.AcceptUnix()
			if err != nil {
				if s.ctx.Err() == nil {
					s.log.Warn("sudo: accept", "err", err)
				}
				return
			}
			select {
			case slots <- struct{}{}:
				s.spawn(func() {
					defer func() { <-slots }()
					s.sudo(c)
				})
			default:
				sudoAnswer(c, sudoReply{Code: 1, Error: fmt.Sprintf("too many commands run through sudo at once (%d)", maxSudoConns)})
				c.Close()
			}
		}
	})
	return nil
}

// sudo runs one client's command as root (uid 0 of the sandbox, with the
// capabilities the sandbox's root has, no more) and answers with its exit
// code. A client that goes away takes its command with it; a signal byte
// it sends is passed on to the command's group.
func (s *server) sudo(c *net.UnixConn) {
	defer c.Close()
	cred, _ := unix.GetsockoptUcred(sudoFD(c), unix.SOL_SOCKET, unix.SO_PEERCRED)
	buf := make([]byte, maxSudoRequest)
	oob := make([]byte, unix.CmsgSpace(3*4))
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	_ = c.SetReadDeadline(time.Time{})
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if err == nil && oobn > 0 {
		files, err = sudoFiles(oob[:oobn])
	}
	fail := func(format string, a ...any) {
		sudoAnswer(c, sudoReply{Code: 1, Error: fmt.Sprintf(format, a...)})
	}
	if err != nil {
		fail("reading the request: %v", err)
		return
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || len(files) != 3 {
		fail("a request is one message of at most %d bytes with three descriptors (standard input, output and error)", maxSudoRequest)
		return
	}
	var req sudoRequest
	if err := json.Unmarshal(buf[:n], &req); err != nil {
		fail("malformed request: %v", err)
		return
	}
	if len(req.Args) == 0 || req.Args[0] == "" {
		fail("no command")
		return
	}
	for _, a := range slices.Concat(req.Args, req.Env, []string{req.Dir}) {
		if strings.IndexByte(a, 0) >= 0 {
			fail("an argument, the environment or the directory contains NUL")
			return
		}
	}
	env := sudoEnv(req, cred)
	dir := req.Dir
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || !strings.HasPrefix(dir, "/") {
		dir = "/"
	}
	path, err := lookPath(req.Args[0], []string{"PATH=" + sudoPath}, dir)
	if err != nil {
		var e *Error
		if errors.As(err, &e) && e.Code == CodeNotFound {
			sudoAnswer(c, sudoReply{Code: 1, Error: req.Args[0] + ": command not found"})
			return
		}
		fail("%v", err)
		return
	}
	p := &process{args: req.Args, started: time.Now(), exited: make(chan struct{}), reported: make(chan struct{})}
	attr := &syscall.ProcAttr{
		Dir:   dir,
		Env:   env,
		Files: []uintptr{files[0].Fd(), files[1].Fd(), files[2].Fd()},
		Sys:   &syscall.SysProcAttr{Setsid: true, Credential: &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}}},
	}
	err = s.procs.fork(path, attr, p)
	if err == syscall.EPERM {
		attr.Sys.Credential.NoSetGroups = true
		err = s.procs.fork(path, attr, p)
	}
	for _, f := range files {
		f.Close()
	}
	files = nil
	if err != nil {
		fail("%s: %v", req.Args[0], execError(req.Args[0], err).Message)
		return
	}
	if cred != nil {
		s.log.Info("sudo", "pid", p.pid, "by_pid", cred.Pid, "by_uid", cred.Uid, "cmd", p.args[0])
	}
	if !s.procs.pid1 {
		s.spawn(func() { s.procs.wait(p) })
	}
	// The client's signals, one byte each; its end kills the command.
	go func() {
		b := make([]byte, 16)
		for {
			n, err := c.Read(b)
			if err != nil || n == 0 {
				_ = p.kill(syscall.SIGKILL)
				return
			}
			if sig := syscall.Signal(b[0]); sig == syscall.SIGINT || sig == syscall.SIGTERM || sig == syscall.SIGHUP || sig == syscall.SIGQUIT {
				_ = p.kill(sig)
			}
		}
	}()
	select {
	case <-p.exited:
	case <-s.ctx.Done():
		_ = p.kill(syscall.SIGKILL)
		<-p.exited
	}
	sudoAnswer(c, sudoReply{Code: p.exitMsg().Code})
}

// sudoEnv is the command's environment: sudo's reset one (TERM, locale,
// root's HOME, USER and LOGNAME, secure PATH, SUDO_*), or with -E the
// client's with root's names on top.
func sudoEnv(req sudoRequest, cred *unix.Ucred) []string {
	var env []string
	if req.KeepEnv {
		env = slices.Clone(req.Env)
	} else {
		for _, kv := range req.Env {
			name, _, _ := strings.Cut(kv, "=")
			if name == "TERM" || name == "COLORTERM" || name == "LANG" || name == "LANGUAGE" || strings.HasPrefix(name, "LC_") {
				env = append(env, kv)
			}
		}
	}
	over := []string{"PATH=" + sudoPath, "USER=root", "LOGNAME=root", "SHELL=/bin/bash", "SUDO_COMMAND=" + strings.Join(req.Args, " ")}
	if !req.KeepEnv || req.Home {
		over = append(over, "HOME=/root")
	}
	if cred != nil {
		over = append(over, fmt.Sprintf("SUDO_UID=%d", cred.Uid), fmt.Sprintf("SUDO_GID=%d", cred.Gid))
		if u, err := lookupUserName(cred.Uid); err == nil {
			over = append(over, "SUDO_USER="+u)
		}
	}
	return mergeEnv(mergeEnv(env, over), req.Set)
}

// lookupUserName is uid's name in the sandbox's /etc/passwd, of which it
// reads at most 1 MiB (the sandbox's files are untrusted).
func lookupUserName(uid uint32) (string, error) {
	f, err := os.Open("/etc/passwd")
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) > 2 && f[2] == fmt.Sprint(uid) {
			return f[0], nil
		}
	}
	return "", os.ErrNotExist
}

func sudoFD(c *net.UnixConn) int {
	fd := -1
	if rc, err := c.SyscallConn(); err == nil {
		_ = rc.Control(func(f uintptr) { fd = int(f) })
	}
	return fd
}

// sudoFiles takes the descriptors of a request's control messages; any
// beyond three are closed, and then it is an error.
func sudoFiles(oob []byte) ([]*os.File, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), "sudo"))
		}
	}
	return files, nil
}

func sudoAnswer(c *net.UnixConn, r sudoReply) {
	b, _ := json.Marshal(r)
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, _ = c.Write(b)
}

// SudoMain is `sudo [-E] [-H] [-n] [-u root] [-s|-i] [NAME=VALUE...] CMD
// [ARG...]` inside a sandbox whose agent serves sudo (hutch's base image
// makes /usr/bin/sudo run it): the agent runs CMD as root with this
// process's standard streams and working directory, and SudoMain returns
// its exit code. No password is asked: every user of the sandbox may, as
// E2B's base image lets its user.
func SudoMain(args []string, stderr io.Writer) int {
	usage := func(msg string) int {
		fmt.Fprintf(stderr, "sudo: %s\nusage: sudo [-E] [-H] [-n] [-u root] [-s|-i] [NAME=VALUE...] COMMAND [ARG...]\n", msg)
		return 1
	}
	var req sudoRequest
	shell, login := false, false
	for len(args) > 0 && strings.HasPrefix(args[0], "-") && args[0] != "-" {
		a := args[0]
		args = args[1:]
		switch a {
		case "--":
		case "-E", "--preserve-env":
			req.KeepEnv = true
		case "-H", "--set-home":
			req.Home = true
		case "-n", "--non-interactive", "-S", "--stdin":
		case "-s", "--shell":
			shell = true
		case "-i", "--login":
			shell, login, req.Home = true, true, true
		case "-u", "--user":
			if len(args) == 0 {
				return usage("option -u needs a user")
			}
			if args[0] != "root" && args[0] != "0" && args[0] != "#0" {
				return usage(fmt.Sprintf("only root is served in this sandbox, not %q", args[0]))
			}
			args = args[1:]
		case "-v", "--validate", "-k", "--reset-timestamp", "-K", "--remove-timestamp":
			return 0
		case "-l", "--list":
			fmt.Println("User may run the following commands in this sandbox:\n    (ALL : ALL) NOPASSWD: ALL")
			return 0
		case "-V", "--version":
			fmt.Println("sudo of hutch's sandbox agent")
			return 0
		default:
			return usage(fmt.Sprintf("unknown option %s", a))
		}
		if a == "--" {
			break
		}
	}
	for len(args) > 0 && strings.Contains(args[0], "=") && !strings.HasPrefix(args[0], "=") {
		req.Set = append(req.Set, args[0])
		args = args[1:]
	}
	if shell {
		sh := "/bin/bash"
		if len(args) == 0 && login {
			args = []string{sh, "-l"}
		} else if len(args) == 0 {
			args = []string{sh}
		} else {
			args = []string{sh, "-c", strings.Join(args, " ")}
			if login {
				args = slices.Insert(args, 1, "-l")
			}
		}
	}
	if len(args) == 0 {
		return usage("no command")
	}
	req.Args, req.Env = args, os.Environ()
	req.Dir, _ = os.Getwd()
	if login {
		req.Dir = "/root"
	}
	code, err := sudoCall(req, os.Stdin, os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintf(stderr, "sudo: %v\n", err)
		return 1
	}
	return code
}

// sudoCall sends req to the agent and waits for the command's end,
// passing on the signals that would end this process.
func sudoCall(req sudoRequest, stdin, stdout, stderr *os.File) (int, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return 1, err
	}
	if len(b) > maxSudoRequest {
		return 1, fmt.Errorf("arguments and environment take %d bytes, more than sudo passes on (%d)", len(b), maxSudoRequest)
	}
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sudoAddr, Net: "unixpacket"})
	if err != nil {
		return 1, fmt.Errorf("this sandbox's agent serves no sudo (%s is not in its image): %v", SudoMarker, err)
	}
	defer c.Close()
	if _, _, err := c.WriteMsgUnix(b, unix.UnixRights(int(stdin.Fd()), int(stdout.Fd()), int(stderr.Fd())), nil); err != nil {
		return 1, fmt.Errorf("sending the command to the agent: %w", err)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	go func() {
		for sig := range sigs {
			_, _ = c.Write([]byte{byte(sig.(syscall.Signal))})
		}
	}()
	buf := make([]byte, 64<<10)
	n, err := c.Read(buf)
	if err != nil {
		return 1, fmt.Errorf("the agent did not answer: %w", err)
	}
	var r sudoReply
	if err := json.Unmarshal(buf[:n], &r); err != nil {
		return 1, fmt.Errorf("the agent's answer: %w", err)
	}
	if r.Error != "" {
		return r.Code, errors.New(r.Error)
	}
	return r.Code, nil
}
