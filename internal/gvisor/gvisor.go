// Package gvisor is hutch's gVisor isolation tier (policy tier "gvisor"):
// the sandbox runs on gVisor's application kernel, runsc, so that its
// system calls are served by gVisor's Sentry and never reach the host's
// kernel directly. hutch writes an OCI bundle from the policy — the host's
// root read-only, the writable areas bound read-write with the namespace
// tier's protected paths bound read-only over them, deny-read paths
// masked, the scrubbed environment, the workspace owner's identity without
// capabilities, the limits — and runs it with a runsc of the pinned
// version, attached to hutch (S4), with a state directory of its own that
// is removed when the sandbox ends. In network mode "proxy" gVisor still
// has no network of the host's: hutch serves its egress proxy on unix
// sockets bound into the view, and its own binary, the sandbox's first
// process (InitMain), relays the sandbox's loopback proxy addresses to
// them.
package gvisor

import (
	"debug/buildinfo"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Module and PinnedVersion name the runsc hutch is built and tested
// against: gVisor publishes no tagged Go module versions, so the pin is a
// pseudo-version of the module gvisor.dev/gvisor.
const (
	Module        = "gvisor.dev/gvisor"
	PinnedVersion = "v0.0.0-20260905035102-160fafc42237"
)

// InstallCommand is the command that builds the pinned runsc. It must be
// a static binary (CGO_ENABLED=0): runsc re-executes itself in an empty
// chroot, where a dynamically linked binary finds no ELF interpreter.
const InstallCommand = "CGO_ENABLED=0 go install " + Module + "/runsc@" + PinnedVersion

// ErrRunsc is the error of a missing or unusable runsc.
var ErrRunsc = errors.New("runsc")

// installAdvice is what an error about runsc tells the user to do.
func installAdvice() string {
	return "install it with:\n  " + InstallCommand + "\n" +
		"(about 3 minutes; it lands in $(go env GOPATH)/bin, or set GOBIN=DIR to choose; then put it on PATH or pass --runsc DIR/runsc)"
}

// Find returns the runsc to use: path when given, else "runsc" on PATH;
// it must be a regular executable built from the pinned version of
// gVisor's module. The error says what is wrong and how to install the
// right one.
func Find(path string) (string, error) {
	if path == "" {
		p, err := exec.LookPath("runsc")
		if err != nil {
			return "", fmt.Errorf("%w: tier %q needs gVisor's runsc, and there is none on PATH; %s", ErrRunsc, "gvisor", installAdvice())
		}
		path = p
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("%w %s: %v", ErrRunsc, path, err)
	}
	st, err := os.Stat(abs)
	if err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		why := "not an executable file"
		if err != nil {
			why = err.Error()
		}
		return "", fmt.Errorf("%w %s: %s; %s", ErrRunsc, abs, why, installAdvice())
	}
	v, err := Version(abs)
	if err != nil {
		return "", fmt.Errorf("%w %s: %v; %s", ErrRunsc, abs, err, installAdvice())
	}
	if v != PinnedVersion {
		return "", fmt.Errorf("%w %s: version %s, hutch needs %s; %s", ErrRunsc, abs, v, PinnedVersion, installAdvice())
	}
	return abs, nil
}

// Version returns the version of gVisor's module a runsc binary was built
// from, from its Go build information (runsc --version says
// "VERSION_MISSING" for a build by go install); a runsc built with cgo is
// an error.
func Version(path string) (string, error) {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("not a Go binary with build information: %v", err)
	}
	if bi.Main.Path != Module {
		return "", fmt.Errorf("built from module %q, not gVisor's %s", bi.Main.Path, Module)
	}
	for _, s := range bi.Settings {
		if s.Key == "CGO_ENABLED" && s.Value != "0" {
			// It would fail in its empty chroot, which has no ELF
			// interpreter, with an error that says nothing of why.
			return "", errors.New("built with cgo; runsc must be a static binary (CGO_ENABLED=0)")
		}
	}
	return bi.Main.Version, nil
}
