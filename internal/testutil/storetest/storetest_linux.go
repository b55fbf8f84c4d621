// Package storetest gives a test's state directory an image from a tarball
// without unpacking it again: the image is imported once per `go test` run
// into a store that the run's test processes share, and each state
// directory's store gets its layers as hard links (a layer in a store
// never changes: sandboxes stack it read-only) and its records as copies.
// hutch's built images (base, code-interpreter) take about a minute each
// to import on two cores, and half a dozen tests of several packages start
// daemons from them.
package storetest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/image/fetch"
)

// Dir holds the shared stores: RUNPID-NAME/, where RUNPID is the go
// command's (the test processes' parent), and RUNPID-NAME.lock. A store
// whose run has ended is removed by the next run that uses this; the test
// script removes Dir after its run.
const Dir = "/var/tmp/hutch-test-stores"

// RunEnv names the pid of a process that lasts the whole run (the test
// script's, which sets it), whose stores the run shares: scripts/test.sh
// imports hutch's built images into them (Prime) while the linters run,
// before any test asks. Unset, the run is the go command's (the test
// processes' parent).
const RunEnv = "HUTCH_TEST_RUN"

// run is the shared stores' run: $HUTCH_TEST_RUN, or the go command's pid.
func run() string {
	if r := os.Getenv(RunEnv); r != "" {
		if _, err := strconv.Atoi(r); err == nil {
			return r
		}
	}
	return strconv.Itoa(os.Getppid())
}

// Prime imports tarball into the run's shared store ($HUTCH_TEST_RUN must
// be set), unless a process of the run has: the tests that ask for it
// then wait on the import already under way, or link at once.
func Prime(tarball string) error {
	if os.Getenv(RunEnv) == "" {
		return fmt.Errorf("$%s is not set: a store shared by the run's tests needs the run's pid", RunEnv)
	}
	_, err := sharedStore(tarball)
	return err
}

// Import gives st the image of tarball (docker save), named as the
// tarball names it. It imports the tarball itself when the shared store
// cannot be linked from (another file system).
func Import(t testing.TB, tarball string, st *image.Store) {
	t.Helper()
	shared, err := sharedStore(tarball)
	if err == nil {
		err = link(filepath.Join(shared, "images"), st.Dir())
	}
	if err == nil {
		return
	}
	t.Logf("storetest: importing %s itself: %v", tarball, err)
	if _, err := fetch.Import(st, tarball, "", fetch.Options{Root: true}); err != nil {
		t.Fatalf("import %s: %v", tarball, err)
	}
}

// sharedStore returns the state directory of the run's shared store of
// tarball, importing it first if no test process of the run has.
func sharedStore(tarball string) (string, error) {
	fi, err := os.Stat(tarball)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(Dir, 0o700); err != nil {
		return "", err
	}
	run := run()
	name := fmt.Sprintf("%s-%s-%d", run, strings.TrimSuffix(filepath.Base(tarball), ".tar"), fi.Size())
	lock, err := os.OpenFile(filepath.Join(Dir, name+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return "", err
	}
	sweep(run)
	dir := filepath.Join(Dir, name)
	done := filepath.Join(dir, "imported")
	if _, err := os.Stat(done); err == nil {
		return dir, nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	st, err := image.Open(dir)
	if err != nil {
		return "", err
	}
	if _, err := fetch.Import(st, tarball, "", fetch.Options{Root: true}); err != nil {
		return "", fmt.Errorf("import %s: %w", tarball, err)
	}
	return dir, os.WriteFile(done, nil, 0o600)
}

// sweep removes the shared stores of runs that have ended (their go
// command is gone), not run's.
func sweep(run string) {
	entries, _ := os.ReadDir(Dir)
	for _, e := range entries {
		pid, _, ok := strings.Cut(e.Name(), "-")
		n, err := strconv.Atoi(pid)
		if !ok || err != nil || pid == run || syscall.Kill(n, 0) != syscall.ESRCH {
			continue
		}
		os.RemoveAll(filepath.Join(Dir, e.Name()))
	}
}

// link puts the store at src into the one at dst (which may not exist
// yet): the layers' files hard-linked, their directories made anew with
// their modes, owners and extended attributes (overlay's opaque marks),
// the records and names copied.
func link(src, dst string) error {
	for _, d := range []struct {
		name string
		link bool
	}{{"layers/sha256", true}, {"records", false}} {
		if err := os.MkdirAll(filepath.Join(dst, d.name), 0o700); err != nil {
			return err
		}
		args := []string{"-a", "--preserve=all"}
		if d.link {
			args = append(args, "-l")
		}
		args = append(args, filepath.Join(src, d.name)+"/.", filepath.Join(dst, d.name)+"/")
		if out, err := exec.Command("cp", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("cp %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	if out, err := exec.Command("cp", "-a", filepath.Join(src, "refs.json"), dst).CombinedOutput(); err != nil {
		return fmt.Errorf("cp refs.json: %v: %s", err, out)
	}
	return nil
}
