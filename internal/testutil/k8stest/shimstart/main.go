// Command shimstart is the containerd shim of the test cluster's runtime
// handlers of gVisor (k8stest.RuntimeHandler.RunscShim): it does the
// shim's start itself and hands every other call, and the shim's serving,
// to gVisor's shim, the file named as itself with ".real" after it.
//
// gVisor's shim's start sets the oom_score_adj of the shim it starts to
// -999 and fails when it cannot; lowering a process's oom_score_adj takes
// CAP_SYS_RESOURCE, which root on the machines hutch's tests run on lacks
// (their bounding set has no bit 24). What that start does otherwise, with
// its grouping off (its default), this does the same way: a socket named by
// the container, a shim serving it started as gVisor's start starts it
// (the socket as its descriptor 3), or the address of the one that serves
// it already; the address and the shim's pid in the bundle, and the
// address on standard output, which containerd takes for a ttrpc shim's of
// version 2. runsc, not the shim, puts a pod's containers in its sandbox.
package main

import (
	"crypto/sha256"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

func main() {
	self, err := os.Executable()
	if err != nil {
		fail(err)
	}
	real := self + ".real"
	flags, action := parse(os.Args[1:])
	if action != "start" {
		fail(syscall.Exec(real, append([]string{real}, os.Args[1:]...), os.Environ()))
	}
	if err := start(real, flags); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "shimstart: %v\n", err)
	os.Exit(1)
}

// parse reads containerd's command line of a shim: -name value flags
// (-debug alone), then the action.
func parse(args []string) (map[string]string, string) {
	flags := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if len(a) < 2 || a[0] != '-' {
			return flags, a
		}
		name := a[1:]
		if name[0] == '-' {
			name = name[1:]
		}
		switch name {
		case "debug", "v", "info":
			flags[name] = "true"
		default:
			if i+1 < len(args) {
				flags[name] = args[i+1]
				i++
			}
		}
	}
	return flags, ""
}

// start starts the shim of the container whose bundle is the working
// directory, unless one serves its socket already, and prints its address.
func start(real string, flags map[string]string) error {
	id, ns, address := flags["id"], flags["namespace"], flags["address"]
	if id == "" || ns == "" || address == "" {
		return fmt.Errorf("start wants -id, -namespace and -address: %q", os.Args[1:])
	}
	path := filepath.Join(address, ns, id)
	if flags["debug"] != "" {
		path = filepath.Join(path, "debug")
	}
	sock := fmt.Sprintf("/run/containerd/s/%x", sha256.Sum256([]byte(path)))
	// The address alone: containerd takes it as a ttrpc shim's of
	// version 2.
	params := "unix://" + sock
	if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
		return err
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		if c, derr := net.DialTimeout("unix", sock, time.Second); derr == nil {
			// A shim serves it already.
			c.Close()
			if err := os.WriteFile("address", []byte("unix://"+sock), 0o644); err != nil {
				return err
			}
			_, err := os.Stdout.WriteString(params)
			return err
		}
		os.Remove(sock)
		if l, err = net.Listen("unix", sock); err != nil {
			return err
		}
	}
	ul := l.(*net.UnixListener)
	ul.SetUnlinkOnClose(false)
	f, err := ul.File()
	ul.Close()
	if err != nil {
		os.Remove(sock)
		return err
	}
	defer f.Close()
	if err := os.WriteFile("address", []byte("unix://"+sock), 0o644); err != nil {
		os.Remove(sock)
		return err
	}
	args := []string{"-namespace", ns, "-address", address, "-id", id}
	if flags["debug"] != "" {
		args = append(args, "-debug")
	}
	cmd := exec.Command(real, args...)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=2")
	cmd.ExtraFiles = []*os.File{f}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		os.Remove(sock)
		return err
	}
	if err := os.WriteFile("shim.pid", []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		cmd.Process.Kill()
		os.Remove(sock)
		return err
	}
	_, err = os.Stdout.WriteString(params)
	return err
}
