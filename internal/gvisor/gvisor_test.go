package gvisor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFindRefuses checks that a missing runsc, and one that is not the
// pinned version, are refused with the command that installs the right one.
func TestFindRefuses(t *testing.T) {
	self, err := os.Executable() // a Go binary of another module
	if err != nil {
		t.Fatal(err)
	}
	notExec := filepath.Join(t.TempDir(), "runsc")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, pathEnv, want string
	}{
		{"none on PATH", "", t.TempDir(), "there is none on PATH"},
		{"missing file", "/nonexistent/runsc", "", "no such file"},
		{"not executable", notExec, "", "not an executable file"},
		{"not a Go binary", "/bin/sh", "", "not a Go binary"},
		{"another module", self, "", "not gVisor's " + Module},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.pathEnv != "" {
				t.Setenv("PATH", tt.pathEnv)
			}
			_, err := Find(tt.path)
			if err == nil {
				t.Fatal("Find accepted it")
			}
			if !errors.Is(err, ErrRunsc) {
				t.Errorf("error %v is not ErrRunsc", err)
			}
			for _, want := range []string{tt.want, InstallCommand, "GOBIN"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

func TestInstallCommand(t *testing.T) {
	want := "CGO_ENABLED=0 go install gvisor.dev/gvisor/runsc@" + PinnedVersion
	if InstallCommand != want {
		t.Errorf("InstallCommand = %q, want %q", InstallCommand, want)
	}
}
