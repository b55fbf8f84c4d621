package runner

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/policy"
)

// PrivateDirs are the host directories that a sandbox of hutch run does
// not see: it gets empty ones of its own, where only its workspace and
// --allow-write paths are the host's.
var PrivateDirs = []string{"/tmp", "/dev/shm"}

// WarnPrivateArgs warns, in one line, when the command's arguments name
// host paths that exist under PrivateDirs but that the sandbox will not
// see; such a command fails inside with "no such file", which says
// nothing of why. Paths are found anywhere in an argument: alone,
// after "--flag=", or in a shell script.
func (s *Sandbox) WarnPrivateArgs(command []string) {
	spec := s.Spec
	var hidden []string
	seen := map[string]bool{}
	for _, arg := range command {
		for _, p := range privatePaths(arg) {
			if p = filepath.Clean(p); seen[p] {
				continue
			}
			seen[p] = true
			if visibleInSandbox(p, spec) {
				continue
			}
			if _, err := os.Lstat(p); err == nil {
				hidden = append(hidden, p)
			}
		}
	}
	if len(hidden) == 0 {
		return
	}
	dir := PrivateDirs[0]
	if strings.HasPrefix(hidden[0], PrivateDirs[1]+"/") {
		dir = PrivateDirs[1]
	}
	// --allow-write takes directories: a file's own, unless that is
	// /tmp itself (all of the host's /tmp is not what the user wants).
	var flags []string
	for _, p := range hidden {
		d := p
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			d = filepath.Dir(p)
		}
		if !slices.Contains(PrivateDirs, d) && !slices.Contains(flags, "--allow-write "+d) {
			flags = append(flags, "--allow-write "+d)
		}
	}
	what, them := hidden[0]+" is", "it"
	if len(hidden) > 1 {
		what, them = strings.Join(hidden, ", ")+" are", "them"
	}
	todo := fmt.Sprintf("put %s in the workspace (%s), or in a directory of %s and pass --allow-write DIR", them, spec.Filesystem.Workspace, dir)
	if len(flags) > 0 {
		todo = fmt.Sprintf("pass %s, or put %s in the workspace (%s)", strings.Join(flags, " "), them, spec.Filesystem.Workspace)
	}
	fmt.Fprintf(s.stderr, "hutch: warning: %s in the host's %s, which the sandbox does not see (it gets a private %s): %s\n", what, dir, dir, todo)
}

// visibleInSandbox reports whether the host path p is the host's in the
// sandbox: in its workspace or an --allow-write path.
func visibleInSandbox(p string, spec policy.Spec) bool {
	for _, area := range append([]string{spec.Filesystem.Workspace}, spec.Filesystem.AllowWrite...) {
		if area != "" && (p == area || strings.HasPrefix(p, strings.TrimSuffix(area, "/")+"/")) {
			return true
		}
	}
	return false
}

// privatePaths returns the absolute paths under PrivateDirs (not the
// directories themselves) that arg holds: the text from one of them,
// at the start of arg or after a blank, '=', ':', a quote or a shell
// operator, up to the next blank, quote or shell operator.
func privatePaths(arg string) []string {
	const before = " \t\n=:'\"(<>|;,&`"
	const after = " \t\n'\"<>|;,&`)"
	var out []string
	for i := 0; i < len(arg); i++ {
		if i > 0 && !strings.ContainsRune(before, rune(arg[i-1])) {
			continue
		}
		for _, d := range PrivateDirs {
			if !strings.HasPrefix(arg[i:], d+"/") {
				continue
			}
			end := i + len(d) + 1
			for end < len(arg) && !strings.ContainsRune(after, rune(arg[end])) {
				end++
			}
			if end > i+len(d)+1 {
				out = append(out, arg[i:end])
			}
			i = end
			break
		}
	}
	return out
}
