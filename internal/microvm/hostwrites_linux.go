package microvm

import (
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/hostperm"
	"github.com/hutch-sandbox/hutch/internal/seccomp"
)

// Nothing a guest writes in the workspace may grant privilege on the host
// (ESCAPES 21, internal/hostperm's rule): the guest's kernel is the
// guest's, and its root (the command itself, in a workspace root owns)
// can ask virtiofsd, which runs as root on the host, for any mode. So the
// rule is the workspace's virtiofsd's, on the host: its reaper
// (startReapedHostWrites) sets the sandbox's umask (the user's with the
// withheld bits) and installs hostperm's seccomp rules on the thread it
// forks virtiofsd from — a chmod or create with a set-id bit, a chmod
// granting a withheld bit, any extended attribute fail, as in the
// sandboxes of the other tiers — and virtiofsd's capability to make
// device nodes is dropped (-o modcaps). A umask that would drop a
// withheld bit fails (EPERM) rather than going to a supervisor: virtiofsd
// sets umask(0) at its start, which so leaves the sandbox's umask, and
// every mode the guest asks for a new file is masked by it.

// hostWrites sets umask and installs virtiofsdRules on the calling
// thread, which must be locked: what it forks then has both.
func hostWrites(umask int) error {
	unix.Umask(umask)
	if err := seccomp.InstallRules(virtiofsdRules(fs.FileMode(umask))); err != nil {
		return fmt.Errorf("microvm: confine the workspace's virtiofsd: %w", err)
	}
	return nil
}

// virtiofsdRules are hostperm's rules for a sandbox's umask
// (seccomp.HostWriteRules), with EPERM for a umask call that would drop a
// withheld bit, which goes to a supervisor in a sandbox.
func virtiofsdRules(umask fs.FileMode) []seccomp.Rule {
	rules := seccomp.HostWriteRules(uint32(hostperm.Withheld(umask)))
	for i, r := range rules {
		if r.Action == seccomp.Notify {
			rules[i].Action = seccomp.EPERM
			rules[i].Why = "a umask that would let new files be writable by others: refused, the umask stays"
		}
	}
	return rules
}
