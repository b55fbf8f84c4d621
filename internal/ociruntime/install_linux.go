package ociruntime

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"

	"golang.org/x/sys/unix"
)

// restartContainerd restarts the node's containerd through its init, from
// a pod in the node's process namespace (hostPID): nsenter into pid 1's
// namespaces, then systemctl.
var restartContainerd = []string{"nsenter", "-t", "1", "-m", "-u", "-i", "-n", "-p", "--", "systemctl", "restart", "containerd"}

// installMain runs install or uninstall (cmd) with args.
func installMain(cmd string, args []string, stdout, stderr io.Writer) int {
	var restart, wait bool
	waitFlag := &wait
	if cmd == UninstallCommand {
		waitFlag = nil
	}
	in, err := installFlags(cmd, args, &restart, waitFlag)
	if err != nil {
		return fail(nil, stderr, err)
	}
	self, err := os.Executable()
	if err != nil {
		return fail(nil, stderr, fmt.Errorf("find hutch-runc's own binary: %w", err))
	}
	var changed bool
	if cmd == InstallCommand {
		changed, err = in.Install(self, stdout)
	} else {
		changed, err = in.Uninstall(self, stdout)
	}
	if err != nil {
		return fail(nil, stderr, err)
	}
	switch {
	case !changed:
		fmt.Fprintln(stdout, "nothing changed")
	case restart:
		fmt.Fprintf(stdout, "restarting containerd: %s\n", strings.Join(restartContainerd, " "))
		if out, err := exec.Command(restartContainerd[0], restartContainerd[1:]...).CombinedOutput(); err != nil {
			return fail(nil, stderr, fmt.Errorf("restart containerd (%s): %v: %s; restart it on the node (systemctl restart containerd)", strings.Join(restartContainerd, " "), err, strings.TrimSpace(string(out))))
		}
		fmt.Fprintln(stdout, "containerd restarted")
	default:
		fmt.Fprintln(stdout, "containerd must be restarted to load the change (systemctl restart containerd on the node, or --restart-containerd)")
	}
	if wait {
		fmt.Fprintln(stdout, "waiting for SIGTERM")
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, unix.SIGTERM, unix.SIGINT)
		<-sig
	}
	return 0
}
