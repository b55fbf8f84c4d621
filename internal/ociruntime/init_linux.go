package ociruntime

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	goruntime "runtime"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/landlock"
	"github.com/hutch-sandbox/hutch/internal/seccomp"
)

// Exit codes of hutch's init when the container's program did not start,
// as a shell's.
const (
	exitConfine       = 125
	exitNotExecutable = 126
	exitNotFound      = 127
)

// initMain is hutch's init in a container: the low-level runtime has made
// the container as its spec says and runs this as the container's program
// (or an exec'd process); it confines itself with Landlock and hutch's
// seccomp table, on the thread that then executes the container's
// program, which keeps its pid and inherits both.
func initMain(args []string, stderr io.Writer) int {
	c, argv, err := parseInitArgs(args)
	if err != nil {
		fmt.Fprintf(stderr, "hutch-runc: %s: %v\n", InitCommand, err)
		return exitConfine
	}
	// Resolved before the filter, in the container's PATH, as runc does.
	path, err := exec.LookPath(argv[0])
	if err != nil && !errors.Is(err, exec.ErrDot) {
		fmt.Fprintf(stderr, "hutch-runc: exec: %q: %v\n", argv[0], unwrapExec(err))
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return exitNotFound
		}
		return exitNotExecutable
	}
	goruntime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(stderr, "hutch-runc: no_new_privs: %v\n", err)
		return exitConfine
	}
	if _, err := landlock.Restrict(landlock.Config{
		ReadOnly:  []string{"/"},
		ReadWrite: c.Writable,
		Devices:   c.Devices,
		Scope:     true,
	}); err != nil {
		fmt.Fprintf(stderr, "hutch-runc: landlock: %v\n", err)
		return exitConfine
	}
	if _, err := seccomp.Install(seccomp.Options{}); err != nil {
		fmt.Fprintf(stderr, "hutch-runc: %v\n", err)
		return exitConfine
	}
	err = unix.Exec(path, argv, os.Environ())
	fmt.Fprintf(stderr, "hutch-runc: exec %s: %v\n", argv[0], err)
	if errors.Is(err, unix.ENOENT) {
		return exitNotFound
	}
	return exitNotExecutable
}

// unwrapExec is the reason of a failed lookup, without os/exec's prefix.
func unwrapExec(err error) error {
	var e *exec.Error
	if errors.As(err, &e) {
		return e.Err
	}
	return err
}
