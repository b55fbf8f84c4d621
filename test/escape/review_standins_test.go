//go:build linux

package escape

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// standInAttempts is a python3 program that tries every way to read,
// change, replace or grow what stands over a hidden path (a file and a
// directory) and a protected one (a placeholder), and prints "GOT <what>"
// for every attempt that succeeded; then it floods the stand-ins with
// refused lookups, many of distinct names, and prints "FLOODED".
const standInAttempts = `
import os, sys
hidden_file, hidden_dir, placeholder = sys.argv[1:4]
def attempt(what, f):
    try:
        f()
        print("GOT", what)
    except OSError:
        pass
for name, p in (("hidden-file", hidden_file), ("hidden-dir", hidden_dir), ("placeholder", placeholder)):
    if name == "placeholder":
        if open(p, "rb").read() != b"":
            print("GOT placeholder content")
    else:
        attempt(name + " read", lambda: open(p, "rb").read(1))
    attempt(name + " list", lambda: os.listdir(p))
    attempt(name + " write", lambda: open(p, "r+b").write(b"x"))
    attempt(name + " append", lambda: open(p, "ab").write(b"x"))
    attempt(name + " truncate", lambda: os.truncate(p, 0))
    attempt(name + " chmod", lambda: os.chmod(p, 0o777))
    attempt(name + " chown", lambda: os.chown(p, os.getuid(), os.getgid()))
    attempt(name + " utime", lambda: os.utime(p, (1, 1)))
    attempt(name + " setxattr", lambda: os.setxattr(p, "user.hutch", b"1"))
    attempt(name + " removexattr", lambda: os.removexattr(p, "user.hutch"))
    attempt(name + " rename away", lambda: os.rename(p, p + ".moved"))
    attempt(name + " replace", lambda: os.rename(sys.argv[4], p))
    attempt(name + " unlink", lambda: os.unlink(p))
    attempt(name + " rmdir", lambda: os.rmdir(p))
    attempt(name + " create below", lambda: open(os.path.join(p, "planted"), "w").close())
    attempt(name + " mkdir below", lambda: os.mkdir(os.path.join(p, "planted-dir")))
    attempt(name + " symlink below", lambda: os.symlink("/etc/passwd", os.path.join(p, "planted-link")))
    attempt(name + " fifo below", lambda: os.mkfifo(os.path.join(p, "planted-fifo")))
    attempt(name + " link below", lambda: os.link("/etc/hostname", os.path.join(p, "planted-hard")))
    attempt(name + " tmpfile below", lambda: os.open(p, os.O_TMPFILE | os.O_WRONLY, 0o600))
    attempt(name + " exec", lambda: os.execv(p, [p]))
for i in range(20000):
    try:
        open(hidden_file, "rb")
    except OSError:
        pass
for i in range(3000):
    try:
        open(os.path.join(hidden_dir, "k%d" % i), "rb")
    except OSError:
        pass
print("FLOODED")
`

// TestItem10_StandIns: what hutch mounts over hidden and protected paths
// — as root, stand-ins hutch's own FUSE server answers (the sandbox can
// send it any request); as a user, a tmpfs — yields nothing of what it
// covers and takes no change, by any call; the host's files stay as they
// were; a flood of refused requests, of one path or of thousands, is
// counted within bounds and hutch ends and reports normally; and the
// stand-ins' filesystem shows in the sandbox only as the single nodes
// mounted over each path, never as a whole.
func TestItem10_StandIns(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		standInAttacks(t, sb, opts{})
	})
	// An ordinary user whose hutch may open /dev/fuse: the sandbox's first
	// process mounts the stand-ins in the sandbox's own user namespace and
	// hands them to hutch.
	t.Run("user with FUSE", func(t *testing.T) {
		sb := newSandbox(t, modes[1])
		node := filepath.Join(hostDir(t, 0, "fuse"), "fuse")
		if err := unix.Mknod(node, unix.S_IFCHR|0o666, int(unix.Mkdev(10, 229))); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(node, 0o666); err != nil {
			t.Fatal(err)
		}
		standInAttacks(t, sb, opts{fuse: node})
	})
}

// standInAttacks runs standInAttempts in sb's sandbox (o's hutch) and
// checks what TestItem10_StandIns says.
func standInAttacks(t *testing.T, sb *harness, o opts) {
	mkdirs(t, sb.home, sb.mode.uid, ".ssh")
	writeFile(t, filepath.Join(sb.home, ".netrc"), "machine x login y password NETRC-REAL-SECRET\n", 0o600, sb.mode.uid)
	writeFile(t, filepath.Join(sb.home, ".ssh", "id_ed25519"), "KEY-REAL-SECRET\n", 0o600, sb.mode.uid)
	before := snapshot(t, sb.home)
	wsBefore := snapshot(t, sb.ws)
	prog := filepath.Join(hostDir(t, sb.mode.uid, "prog"), "attempts.py")
	writeFile(t, prog, standInAttempts, 0o644, sb.mode.uid)
	hiddenFile := filepath.Join(sb.home, ".netrc")
	hiddenDir := filepath.Join(sb.home, ".ssh")
	placeholder := filepath.Join(sb.ws, ".bashrc")
	r := sb.run(o, fmt.Sprintf(`touch spare && /usr/bin/python3 %s %s %s %s spare; rm -f spare; grep -c ' - fuse ' /proc/self/mountinfo; awk '$9 == "fuse" && $4 == "/" {print "WHOLE", $5}' /proc/self/mountinfo`,
		prog, hiddenFile, hiddenDir, placeholder))
	if r.code != 0 || !strings.Contains(r.stdout, "FLOODED") {
		t.Fatalf("the attempts did not run to their end:\n%s", r)
	}
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, "GOT ") {
			t.Errorf("a stand-in took %s", strings.TrimPrefix(l, "GOT "))
		}
		if strings.HasPrefix(l, "WHOLE ") {
			t.Errorf("the stand-ins' whole filesystem is mounted in the sandbox at %s", strings.TrimPrefix(l, "WHOLE "))
		}
	}
	if strings.Contains(r.stdout+r.stderr, "REAL-SECRET") {
		t.Errorf("a hidden file's content showed:\n%s", r)
	}
	sameTree(t, sb.home, before)
	sameTree(t, sb.ws, wsBefore)
	if _, err := os.Lstat(placeholder); !os.IsNotExist(err) {
		t.Errorf("the placeholder outlived the sandbox on the host: %v", err)
	}
	if sb.mode.uid != 0 && o.fuse == "" {
		return // no FUSE for this user here: refused, unreported
	}
	for _, want := range []string{
		"read " + hiddenFile + " (deny-read, a default) ×",
		"and 995 more", // 1000 distinct refusals kept, 5 listed
		"hutch: to allow them: --allow-read " + hiddenFile,
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("hutch's report lacks %q:\n%s", want, r)
		}
	}
}
