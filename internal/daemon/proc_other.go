//go:build !linux

package daemon

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// errNotSupported reports a platform without sandboxes.
var errNotSupported = errors.New("hutch serve runs sandboxes on Linux only")

func startSandbox(sandbox.Runtime, sandbox.Config) (instance, net.Conn, error) {
	return nil, nil, errNotSupported
}

func processStart(int) (uint64, error) { return 0, errNotSupported }

func killProcess(int, uint64, time.Duration) (bool, error) { return false, errNotSupported }

func openProcess(int, uint64) (int, error) { return -1, errNotSupported }

func closeFD(int) {}

// lockStateDir only opens the lock file: sandboxes run on Linux only.
func lockStateDir(dir string) (*os.File, error) {
	return os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
}

// devOf is 0: sandboxes run on Linux only.
func devOf(os.FileInfo) uint64 { return 0 }

// removeSandboxDir removes a sandbox's directory.
func removeSandboxDir(dir string) error { return os.RemoveAll(dir) }

// mountReviewTmpfs fails: review workspaces need Linux.
func mountReviewTmpfs(string, int64) error { return errors.New("review workspaces need Linux") }
