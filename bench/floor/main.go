//go:build linux

// Command floor is the benchmark's reference point for any sandbox launched
// by a Go program: it does nothing but what every such sandbox must do —
// start a Go process, clone a child into new user (mapped to an unused
// uid), mount, pid, net, ipc, uts and cgroup namespaces, exec the command
// there as PID 1 and wait for it. No mounts, no init, no hardening. hutch
// cannot start faster than this on the same machine.
//
// Usage: floor COMMAND [ARGS...]
package main

import (
	"fmt"
	"os"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: floor COMMAND [ARGS...]")
		os.Exit(2)
	}
	id := os.Getuid()
	if id == 0 {
		id = 1_000_000_000 // as hutch maps a sandbox that root starts
	}
	attr := &syscall.ProcAttr{Files: []uintptr{0, 1, 2}, Sys: &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID |
			syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWCGROUP,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: id, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: id, Size: 1}},
	}}
	pid, err := syscall.ForkExec(os.Args[1], os.Args[1:], attr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(125)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(125)
	}
	os.Exit(ws.ExitStatus())
}
