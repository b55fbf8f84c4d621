package ociruntime

import (
	"bufio"
	"bytes"
	"errors"
	goflag "flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// InstallCommand and UninstallCommand are hutch-runc's commands that put
// it on a node, and take it off, from a pod that has the node's root
// mounted (deploy/kubernetes/hutch-runc.yaml, a DaemonSet): its own
// binary, and containerd 2's runtime handler HandlerName in a drop-in of
// containerd's configuration.
const (
	InstallCommand   = "install"
	UninstallCommand = "uninstall"
)

// HandlerName is the containerd runtime handler install writes: the
// handler of the RuntimeClass hutch (deploy/kubernetes/runtimeclass.yaml).
const HandlerName = "hutch"

// dropInName is the name of install's file in containerd's drop-in
// directory.
const dropInName = HandlerName + ".toml"

// dropInHeader starts every drop-in install writes: uninstall removes
// only a file of install's.
const dropInHeader = "# The containerd runtime handler \"hutch\" (hutch-runc install writes it,\n# hutch-runc uninstall removes it; a file that differs is left alone).\n"

// Installation is where install puts hutch-runc on a node, and how. The
// paths other than Host are the node's (as containerd sees them); install
// reads and writes them under Host.
type Installation struct {
	// Host is the node's root directory as mounted here (/host in the
	// DaemonSet's pod); "/" on the node itself.
	Host string
	// BinDir is the directory of the node's binaries that gets
	// hutch-runc (the handler's BinaryName): /usr/local/bin by default.
	BinDir string
	// ConfDir is containerd's drop-in directory, which the node's
	// containerd configuration imports: /etc/containerd/conf.d by
	// default.
	ConfDir string
	// ContainerdConfig is the node's containerd configuration, read to
	// warn when it does not import ConfDir: /etc/containerd/config.toml
	// by default.
	ContainerdConfig string
	// SystemdCgroup is the handler's runc option SystemdCgroup: it must
	// match the node's other handlers (the kubelet's cgroup driver).
	SystemdCgroup bool
}

// Validate reports the first field that is not an absolute path.
func (in *Installation) Validate() error {
	for _, f := range []struct{ flag, v string }{{"--host", in.Host}, {"--bin-dir", in.BinDir}, {"--containerd-conf-dir", in.ConfDir}, {"--containerd-config", in.ContainerdConfig}} {
		if f.v == "" {
			return fmt.Errorf("%s is required", f.flag)
		}
		if !filepath.IsAbs(f.v) {
			return fmt.Errorf("%s %q: not an absolute path", f.flag, f.v)
		}
	}
	fi, err := os.Stat(in.Host)
	if err != nil {
		return fmt.Errorf("--host: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("--host %s: not a directory", in.Host)
	}
	return nil
}

// onHost is the node's path p as seen here.
func (in *Installation) onHost(p string) string { return filepath.Join(in.Host, p) }

// Binary is hutch-runc's path on the node: the handler's BinaryName.
func (in *Installation) Binary() string { return filepath.Join(in.BinDir, "hutch-runc") }

// DropIn is the drop-in's path on the node.
func (in *Installation) DropIn() string { return filepath.Join(in.ConfDir, dropInName) }

// dropIn is the drop-in's content: containerd 2's configuration (version
// 3), the CRI plugin's runtime handler HandlerName with the runc shim,
// hutch-runc as its runtime and the pods' dev.hutch.* annotations passed
// on.
func (in *Installation) dropIn(systemdCgroup bool) []byte {
	return fmt.Appendf(nil, `%sversion = 3

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.%[2]q]
  runtime_type = "io.containerd.runc.v2"
  pod_annotations = ["dev.hutch.*"]
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.%[2]q.options]
    BinaryName = %[3]q
    SystemdCgroup = %[4]t
`, dropInHeader, HandlerName, in.Binary(), systemdCgroup)
}

// isOwnDropIn reports whether b is a drop-in install writes for this
// installation, with either SystemdCgroup.
func (in *Installation) isOwnDropIn(b []byte) bool {
	return bytes.Equal(b, in.dropIn(false)) || bytes.Equal(b, in.dropIn(true))
}

// Install copies the binary self (hutch-runc's own) to Binary and writes
// the drop-in, each only when it is not already as it should be, and
// says on out what it did; it returns whether it changed anything. A
// warning goes to out when the node's containerd configuration does not
// import the drop-in.
func (in *Installation) Install(self string, out io.Writer) (bool, error) {
	if err := in.Validate(); err != nil {
		return false, err
	}
	changed := false
	bin := in.onHost(in.Binary())
	same, err := sameBinary(self, bin)
	if err != nil {
		return false, err
	}
	if same {
		fmt.Fprintf(out, "%s: in place\n", bin)
	} else {
		if err := copyAtomic(self, bin); err != nil {
			return false, err
		}
		changed = true
		fmt.Fprintf(out, "%s: installed\n", bin)
	}
	conf := in.onHost(in.DropIn())
	want := in.dropIn(in.SystemdCgroup)
	have, err := readDropIn(conf)
	switch {
	case err == nil && bytes.Equal(have, want):
		fmt.Fprintf(out, "%s: in place\n", conf)
	case err == nil && !in.isOwnDropIn(have):
		return changed, fmt.Errorf("%s: exists and is not hutch-runc install's (remove it, or give another --containerd-conf-dir)", conf)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return changed, err
	default:
		if err := os.MkdirAll(filepath.Dir(conf), 0o755); err != nil {
			return changed, err
		}
		if err := writeAtomic(conf, want, 0o644); err != nil {
			return changed, err
		}
		changed = true
		fmt.Fprintf(out, "%s: wrote the runtime handler %q\n", conf, HandlerName)
	}
	if w := in.ImportWarning(); w != "" {
		fmt.Fprintf(out, "warning: %s\n", w)
	}
	return changed, nil
}

// Uninstall removes the binary and the drop-in, each only when it is
// what install writes (the binary: the same as self), and says on out
// what it did; it returns whether it removed anything. A file that is
// not install's is an error that names it, and stays.
func (in *Installation) Uninstall(self string, out io.Writer) (bool, error) {
	if err := in.Validate(); err != nil {
		return false, err
	}
	changed := false
	conf := in.onHost(in.DropIn())
	have, err := readDropIn(conf)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		fmt.Fprintf(out, "%s: absent\n", conf)
	case err != nil:
		return false, err
	case !in.isOwnDropIn(have):
		return false, fmt.Errorf("%s: not the drop-in hutch-runc install writes: left as it is", conf)
	default:
		if err := os.Remove(conf); err != nil {
			return false, err
		}
		changed = true
		fmt.Fprintf(out, "%s: removed\n", conf)
	}
	bin := in.onHost(in.Binary())
	if _, err := os.Lstat(bin); errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(out, "%s: absent\n", bin)
		return changed, nil
	}
	same, err := sameBinary(self, bin)
	if err != nil {
		return changed, err
	}
	if !same {
		return changed, fmt.Errorf("%s: not this hutch-runc's binary (another version?): left as it is", bin)
	}
	if err := os.Remove(bin); err != nil {
		return changed, err
	}
	fmt.Fprintf(out, "%s: removed\n", bin)
	return true, nil
}

// Verify reports whether the binary is self and the drop-in is install's:
// the readiness of a DaemonSet's pod (check --host).
func (in *Installation) Verify(self string) (string, error) {
	if err := in.Validate(); err != nil {
		return "", err
	}
	bin := in.onHost(in.Binary())
	same, err := sameBinary(self, bin)
	if err != nil {
		return "", err
	}
	if !same {
		return "", fmt.Errorf("%s: absent or not this hutch-runc (run hutch-runc install)", bin)
	}
	conf := in.onHost(in.DropIn())
	have, err := readDropIn(conf)
	if err != nil {
		return "", fmt.Errorf("the runtime handler %q: %w (run hutch-runc install)", HandlerName, err)
	}
	if !in.isOwnDropIn(have) {
		return "", fmt.Errorf("%s: not the drop-in hutch-runc install writes", conf)
	}
	return fmt.Sprintf("%s, the runtime handler %q in %s", in.Binary(), HandlerName, in.DropIn()), nil
}

// ImportWarning says why the node's containerd would not load the drop-in
// (its configuration does not import it), "" when it would.
func (in *Installation) ImportWarning() string {
	path := in.onHost(in.ContainerdConfig)
	imports, err := containerdImports(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Sprintf("%s does not exist: containerd then imports no drop-in; write it with imports = [%q]", path, filepath.Join(in.ConfDir, "*.toml"))
	}
	if err != nil {
		return err.Error()
	}
	for _, imp := range imports {
		imp = filepath.Clean(imp)
		if !filepath.IsAbs(imp) {
			imp = filepath.Join(filepath.Dir(in.ContainerdConfig), imp)
		}
		if ok, _ := filepath.Match(imp, in.DropIn()); ok {
			return ""
		}
	}
	return fmt.Sprintf("%s does not import %s: containerd will not load the runtime handler %q; add %q to its imports = [...]", path, in.DropIn(), HandlerName, filepath.Join(in.ConfDir, "*.toml"))
}

// maxContainerdConfig bounds the node's containerd configuration as read.
const maxContainerdConfig = 1 << 20

// containerdImports reads the top-level imports = [...] of the containerd
// configuration at path (before its first table, where TOML keeps the
// top-level keys): the strings of the array, which may span lines.
func containerdImports(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, maxContainerdConfig))
	var array strings.Builder
	inArray, line, start := false, 0, 0
	for sc.Scan() {
		line++
		l := strings.TrimSpace(sc.Text())
		if !inArray {
			if strings.HasPrefix(l, "[") {
				return nil, nil
			}
			k, v, ok := strings.Cut(l, "=")
			if !ok || strings.TrimSpace(k) != "imports" {
				continue
			}
			l, start, inArray = strings.TrimSpace(v), line, true
			if !strings.HasPrefix(l, "[") {
				return nil, fmt.Errorf("%s:%d: imports is not an array", path, line)
			}
			l = l[1:]
		}
		body, closed := cutArray(l)
		array.WriteString(body + "\n")
		if closed {
			strs, err := tomlStrings(array.String())
			if err != nil {
				return nil, fmt.Errorf("%s:%d: imports: %w", path, start, err)
			}
			return strs, nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if inArray {
		return nil, fmt.Errorf("%s:%d: imports: the array does not end", path, start)
	}
	return nil, nil
}

// cutArray returns a line of an array's body up to its closing bracket
// (outside strings), comments left out, and whether it closed there.
func cutArray(l string) (string, bool) {
	var quote byte
	for i := 0; i < len(l); i++ {
		c := l[i]
		switch {
		case quote != 0:
			if c == '\\' && quote == '"' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '#':
			return l[:i], false
		case c == ']':
			return l[:i], true
		}
	}
	return l, false
}

// tomlStrings reads the comma-separated TOML strings of an array's body.
func tomlStrings(body string) ([]string, error) {
	var out []string
	s := strings.TrimSpace(body)
	for s != "" {
		var v string
		switch s[0] {
		case '\'':
			end := strings.IndexByte(s[1:], '\'')
			if end < 0 {
				return nil, errors.New("a string does not end")
			}
			v, s = s[1:1+end], s[2+end:]
		case '"':
			q, err := strconv.QuotedPrefix(s)
			if err != nil {
				return nil, fmt.Errorf("a string: %w", err)
			}
			if v, err = strconv.Unquote(q); err != nil {
				return nil, fmt.Errorf("a string: %w", err)
			}
			s = s[len(q):]
		default:
			return nil, fmt.Errorf("not a string: %.20q", s)
		}
		out = append(out, v)
		s = strings.TrimSpace(s)
		s = strings.TrimSpace(strings.TrimPrefix(s, ","))
	}
	return out, nil
}

// sameBinary reports whether the file at path exists, is executable
// (0755) and holds the bytes of self.
func sameBinary(self, path string) (bool, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o755 {
		return false, nil
	}
	a, err := os.ReadFile(self)
	if err != nil {
		return false, fmt.Errorf("read hutch-runc's own binary: %w", err)
	}
	if int64(len(a)) != fi.Size() {
		return false, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	return bytes.Equal(a, b), nil
}

// copyAtomic copies the file src to dst (mode 0755) through a temporary
// file in dst's directory, synced and renamed over dst: the node never
// sees half a binary at dst.
func copyAtomic(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("read hutch-runc's own binary: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return writeAtomic(dst, b, 0o755)
}

// writeAtomic writes b to path with mode through a temporary file in
// path's directory, synced, renamed over path, and the directory synced.
func writeAtomic(path string, b []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// installFlags parses the flags of install, uninstall and check --host
// into an Installation; restart and wait are set when the command has
// them (nil: it does not).
func installFlags(cmd string, args []string, restart, wait *bool) (*Installation, error) {
	fset := goflag.NewFlagSet("hutch-runc "+cmd, goflag.ContinueOnError)
	fset.SetOutput(io.Discard)
	in := &Installation{}
	fset.StringVar(&in.Host, "host", "", "the node's root directory as mounted here (required), e.g. /host")
	fset.StringVar(&in.BinDir, "bin-dir", "/usr/local/bin", "the node's directory for hutch-runc")
	fset.StringVar(&in.ConfDir, "containerd-conf-dir", "/etc/containerd/conf.d", "containerd's drop-in directory on the node")
	fset.StringVar(&in.ContainerdConfig, "containerd-config", "/etc/containerd/config.toml", "containerd's configuration on the node")
	if cmd == InstallCommand {
		fset.BoolVar(&in.SystemdCgroup, "systemd-cgroup", false, "the handler's runc option SystemdCgroup (the kubelet's cgroup driver is systemd)")
	}
	if restart != nil {
		fset.BoolVar(restart, "restart-containerd", false, "restart the node's containerd when something changed")
	}
	if wait != nil {
		fset.BoolVar(wait, "wait", false, "then stay running until SIGTERM (a DaemonSet's pod)")
	}
	if err := fset.Parse(args); err != nil {
		return nil, fmt.Errorf("%s: %w", cmd, err)
	}
	if fset.NArg() > 0 {
		return nil, fmt.Errorf("%s: unexpected argument %q", cmd, fset.Arg(0))
	}
	if in.Host == "" {
		return nil, fmt.Errorf("%s: --host is required (the node's root directory as mounted here, e.g. /host)", cmd)
	}
	return in, nil
}

// readDropIn reads the drop-in at path (as seen here). A link or other
// file that is not a regular one is an error naming it: install never
// writes one, and a link's target would be resolved here, not on the
// node.
func readDropIn(path string) ([]byte, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%v): not the drop-in hutch-runc install writes", path, fi.Mode().Type())
	}
	if fi.Size() > maxContainerdConfig {
		return nil, fmt.Errorf("%s: larger than %d bytes: not the drop-in hutch-runc install writes", path, maxContainerdConfig)
	}
	return os.ReadFile(path)
}
