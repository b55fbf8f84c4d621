//go:build linux

package ociruntime

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// testInstallation is an Installation of defaults on a node whose root is
// a new temporary directory, and a file standing for hutch-runc's own
// binary.
func testInstallation(t *testing.T) (*Installation, string) {
	t.Helper()
	self := filepath.Join(t.TempDir(), "hutch-runc")
	if err := os.WriteFile(self, []byte("hutch-runc, this version"), 0o755); err != nil {
		t.Fatal(err)
	}
	in, err := installFlags(InstallCommand, []string{"--host", t.TempDir()}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return in, self
}

// writeHostFile writes body to the node's path p.
func writeHostFile(t *testing.T, in *Installation, p, body string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(in.onHost(p)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(in.onHost(p), []byte(body), mode); err != nil {
		t.Fatal(err)
	}
}

func TestInstall(t *testing.T) {
	in, self := testInstallation(t)
	var out bytes.Buffer
	changed, err := in.Install(self, &out)
	if err != nil || !changed {
		t.Fatalf("install: changed %v, %v\n%s", changed, err, out.String())
	}
	bin := filepath.Join(in.Host, "usr/local/bin/hutch-runc")
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o755 {
		t.Errorf("%s: mode %v, want 0755", bin, fi.Mode())
	}
	if b, _ := os.ReadFile(bin); string(b) != "hutch-runc, this version" {
		t.Errorf("%s holds %q", bin, b)
	}
	conf := filepath.Join(in.Host, "etc/containerd/conf.d/hutch.toml")
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	// containerd 2's configuration, as the test cluster's (k8stest).
	for _, want := range []string{
		"version = 3\n",
		`[plugins."io.containerd.cri.v1.runtime".containerd.runtimes."hutch"]` + "\n",
		`  runtime_type = "io.containerd.runc.v2"` + "\n",
		`  pod_annotations = ["dev.hutch.*"]` + "\n",
		`  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes."hutch".options]` + "\n",
		`    BinaryName = "/usr/local/bin/hutch-runc"` + "\n",
		"    SystemdCgroup = false\n",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s: no %q in:\n%s", conf, want, b)
		}
	}
	if fi, _ := os.Stat(conf); fi.Mode().Perm() != 0o644 {
		t.Errorf("%s: mode %v, want 0644", conf, fi.Mode())
	}
	if !strings.Contains(out.String(), "config.toml does not exist") {
		t.Errorf("no warning that the node has no containerd configuration:\n%s", out.String())
	}
	if left, _ := filepath.Glob(filepath.Join(in.Host, "*/*/*/.*tmp-*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}

	// Again: nothing changes, and the files are the same ones.
	before := inode(t, bin)
	out.Reset()
	if changed, err := in.Install(self, &out); err != nil || changed {
		t.Fatalf("install again: changed %v, %v\n%s", changed, err, out.String())
	}
	if strings.Count(out.String(), ": in place\n") != 2 {
		t.Errorf("install again says:\n%s", out.String())
	}
	if inode(t, bin) != before {
		t.Errorf("install again replaced %s", bin)
	}
	if _, err := in.Verify(self); err != nil {
		t.Errorf("verify: %v", err)
	}

	// A new version of the binary replaces the old.
	if err := os.WriteFile(self, []byte("hutch-runc, the next version"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Verify(self); err == nil || !strings.Contains(err.Error(), bin) {
		t.Errorf("verify with another binary installed: %v, want an error naming %s", err, bin)
	}
	if changed, err := in.Install(self, &out); err != nil || !changed {
		t.Fatalf("install a new version: changed %v, %v", changed, err)
	}
	if b, _ := os.ReadFile(bin); string(b) != "hutch-runc, the next version" {
		t.Errorf("%s holds %q after an upgrade", bin, b)
	}

	// --systemd-cgroup rewrites install's own drop-in.
	in.SystemdCgroup = true
	if changed, err := in.Install(self, &out); err != nil || !changed {
		t.Fatalf("install with --systemd-cgroup: changed %v, %v", changed, err)
	}
	if b, _ := os.ReadFile(conf); !strings.Contains(string(b), "SystemdCgroup = true\n") {
		t.Errorf("%s with --systemd-cgroup:\n%s", conf, b)
	}
	if _, err := in.Verify(self); err != nil {
		t.Errorf("verify with --systemd-cgroup: %v", err)
	}
}

func inode(t *testing.T, p string) uint64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func TestInstallRefusesOthersDropIn(t *testing.T) {
	in, self := testInstallation(t)
	const other = "# the operator's own\n[plugins]\n"
	writeHostFile(t, in, "/etc/containerd/conf.d/hutch.toml", other, 0o644)
	_, err := in.Install(self, &bytes.Buffer{})
	conf := in.onHost("/etc/containerd/conf.d/hutch.toml")
	if err == nil || !strings.Contains(err.Error(), conf) {
		t.Fatalf("install over another drop-in: %v, want an error naming %s", err, conf)
	}
	if b, _ := os.ReadFile(conf); string(b) != other {
		t.Errorf("install changed another's drop-in: %q", b)
	}
	if _, err := in.Uninstall(self, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), conf) {
		t.Errorf("uninstall of another drop-in: %v, want an error naming %s", err, conf)
	}
	if b, _ := os.ReadFile(conf); string(b) != other {
		t.Errorf("uninstall changed another's drop-in: %q", b)
	}

	// A link there is not install's either, whatever it points to (its
	// target would be resolved in the pod, not on the node).
	if err := os.Remove(conf); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Install(self, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	own := conf + ".own"
	if err := os.Rename(conf, own); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(own, conf); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func(string, io.Writer) (bool, error){"install": in.Install, "uninstall": in.Uninstall} {
		if _, err := f(self, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), conf+": not a regular file") {
			t.Errorf("%s over a link: %v, want an error naming %s", name, err, conf)
		}
		if fi, err := os.Lstat(conf); err != nil || fi.Mode().Type() != os.ModeSymlink {
			t.Errorf("%s changed the link: %v", name, err)
		}
	}
	if _, err := in.Verify(self); err == nil || !strings.Contains(err.Error(), conf) {
		t.Errorf("verify of a link: %v, want an error naming %s", err, conf)
	}
}

func TestUninstall(t *testing.T) {
	in, self := testInstallation(t)
	if _, err := in.Install(self, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	bin, conf := in.onHost(in.Binary()), in.onHost(in.DropIn())

	// Another binary at hutch-runc's path stays, and uninstall says so.
	if err := os.WriteFile(self, []byte("another hutch-runc"), 0o755); err != nil {
		t.Fatal(err)
	}
	changed, err := in.Uninstall(self, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), bin) {
		t.Errorf("uninstall with another binary installed: %v, want an error naming %s", err, bin)
	}
	if !changed {
		t.Error("uninstall removed nothing: the drop-in was install's")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Errorf("uninstall removed another binary: %v", err)
	}
	if _, err := os.Stat(conf); !os.IsNotExist(err) {
		t.Errorf("the drop-in after uninstall: %v", err)
	}

	if err := os.WriteFile(self, []byte("hutch-runc, this version"), 0o755); err != nil {
		t.Fatal(err)
	}
	if changed, err := in.Uninstall(self, &bytes.Buffer{}); err != nil || !changed {
		t.Fatalf("uninstall: changed %v, %v", changed, err)
	}
	if _, err := os.Stat(bin); !os.IsNotExist(err) {
		t.Errorf("%s after uninstall: %v", bin, err)
	}
	var out bytes.Buffer
	if changed, err := in.Uninstall(self, &out); err != nil || changed {
		t.Errorf("uninstall again: changed %v, %v", changed, err)
	}
	if strings.Count(out.String(), ": absent\n") != 2 {
		t.Errorf("uninstall again says:\n%s", out.String())
	}
}

func TestInstallImportWarning(t *testing.T) {
	for _, tt := range []struct {
		name, config string
		// warn is what the warning says, "" for none.
		warn string
	}{
		{"no imports", "version = 3\n[plugins]\n", "does not import /etc/containerd/conf.d/hutch.toml"},
		{"a glob of the directory", "version = 3\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n", ""},
		{"the file itself, single quotes", "imports = ['/etc/containerd/conf.d/hutch.toml']\n", ""},
		{"relative to the configuration", "imports = [\"conf.d/*.toml\"]\n", ""},
		{"several lines, comments", "# top\nversion = 3\nimports = [\n  \"/etc/other/*.toml\", # another\n  \"/etc/containerd/conf.d/*.toml\",\n]\n[grpc]\n", ""},
		{"another directory", "imports = [\"/etc/other/*.toml\"]\n", "does not import"},
		{"imports of a table is not containerd's", "version = 3\n[plugins.x]\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n", "does not import"},
		{"not an array", "imports = \"/etc/containerd/conf.d/*.toml\"\n", "config.toml:1: imports is not an array"},
		{"an array that does not end", "version = 3\nimports = [\"/etc/containerd/conf.d/*.toml\",\n", "config.toml:2: imports: the array does not end"},
		{"not a string", "imports = [3]\n", "config.toml:1: imports: not a string"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in, _ := testInstallation(t)
			writeHostFile(t, in, "/etc/containerd/config.toml", tt.config, 0o644)
			w := in.ImportWarning()
			if tt.warn == "" && w != "" || !strings.Contains(w, tt.warn) {
				t.Errorf("warning %q, want one with %q", w, tt.warn)
			}
			if w != "" && !strings.Contains(w, in.onHost("/etc/containerd/config.toml")) {
				t.Errorf("warning %q does not name the file", w)
			}
		})
	}
}

func TestInstallFlags(t *testing.T) {
	host := t.TempDir()
	for _, tt := range []struct {
		args []string
		err  string
	}{
		{nil, "--host is required"},
		{[]string{"--host", "host"}, `--host "host": not an absolute path`},
		{[]string{"--host", filepath.Join(host, "none")}, "none: no such file"},
		{[]string{"--host", host, "--bin-dir", "bin"}, `--bin-dir "bin": not an absolute path`},
		{[]string{"--host", host, "--containerd-conf-dir", ""}, "--containerd-conf-dir is required"},
		{[]string{"--host", host, "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"--host", host, "extra"}, `unexpected argument "extra"`},
	} {
		in, err := installFlags(InstallCommand, tt.args, nil, nil)
		if err == nil {
			err = in.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("install %q: %v, want an error with %q", tt.args, err, tt.err)
		}
	}
	in, err := installFlags(InstallCommand, []string{"--host", host, "--bin-dir", "/opt/bin", "--containerd-conf-dir", "/etc/ctd.d", "--systemd-cgroup"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if in.Binary() != "/opt/bin/hutch-runc" || in.DropIn() != "/etc/ctd.d/hutch.toml" || !in.SystemdCgroup {
		t.Errorf("flags read as %+v", in)
	}
}

// TestInstallCommand runs install and uninstall as the DaemonSet does,
// with the test's binary as hutch-runc's.
// The restart of containerd is a command that counts its runs in a file of
// the test's: the machine's containerd is never restarted.
func TestInstallCommand(t *testing.T) {
	host := t.TempDir()
	restarts := filepath.Join(t.TempDir(), "restarts")
	saved := restartContainerd
	restartContainerd = []string{"sh", "-c", "echo restart >>" + restarts}
	t.Cleanup(func() { restartContainerd = saved })
	countRestarts := func() int {
		b, _ := os.ReadFile(restarts)
		return strings.Count(string(b), "restart\n")
	}
	run := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := installMain(args[0], args[1:], &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := run(InstallCommand, "--host", host); code != 0 || !strings.Contains(out, "containerd must be restarted") {
		t.Fatalf("install: %d\n%s", code, out)
	}
	if n := countRestarts(); n != 0 {
		t.Errorf("install without --restart-containerd restarted containerd %d times", n)
	}
	if code, out := run(InstallCommand, "--host", host, "--restart-containerd"); code != 0 || !strings.HasSuffix(out, "nothing changed\n") {
		t.Errorf("install again (no restart: nothing changed): %d\n%s", code, out)
	}
	if n := countRestarts(); n != 0 {
		t.Errorf("install that changed nothing restarted containerd %d times", n)
	}
	if code, out := run(InstallCommand, "--host", host, "--restart-containerd", "--systemd-cgroup"); code != 0 || !strings.Contains(out, "containerd restarted") {
		t.Errorf("install that changes the drop-in, --restart-containerd: %d\n%s", code, out)
	}
	if n := countRestarts(); n != 1 {
		t.Errorf("install that changed the drop-in restarted containerd %d times, want 1", n)
	}
	if code, out := run(UninstallCommand, "--host", host, "--wait"); code != 1 || !strings.Contains(out, "-wait") {
		t.Errorf("uninstall --wait: %d\n%s", code, out)
	}
	if code, out := run(UninstallCommand, "--host", host); code != 0 || !strings.Contains(out, "removed") {
		t.Errorf("uninstall: %d\n%s", code, out)
	}

	// A restart that fails fails the command, with the init's words.
	restartContainerd = []string{"sh", "-c", "echo no init here >&2; exit 1"}
	if code, out := run(InstallCommand, "--host", host, "--restart-containerd"); code != 1 || !strings.Contains(out, "restart containerd") || !strings.Contains(out, "no init here") {
		t.Errorf("install whose restart fails: %d\n%s", code, out)
	}
}
