package ociruntime

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestRewrite: the command lines containerd's shim, Docker and a person
// give runc become the low-level runtime's with its root under
// hutch-runc's and the flags hutch-runc sets replaced, whatever way they
// were spelled; everything else passes unchanged.
func TestRewrite(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		set   map[string]string
		extra []string
		tail  []string
		want  string
		cmd   string
		id    string
	}{
		{
			name: "shim create",
			args: []string{"--root", "/run/containerd/runc/default", "--log", "/b/log.json", "--log-format", "json", "create", "--bundle", "/b", "--pid-file", "/b/init.pid", "c1"},
			set:  map[string]string{"bundle": "/h/c1/bundle"},
			want: "--root /R --log /b/log.json --log-format json create --bundle /h/c1/bundle --pid-file /b/init.pid -- c1",
			cmd:  "create", id: "c1",
		},
		{
			name: "short and inline spellings",
			args: []string{"-root=/x", "--systemd-cgroup", "create", "-b", "/b", "--console-socket=/s", "--no-pivot", "c2"},
			set:  map[string]string{"bundle": "/h", "console-socket": "/abs/s"},
			want: "--root /R --systemd-cgroup create --bundle /h --console-socket /abs/s --no-pivot -- c2",
			cmd:  "create", id: "c2",
		},
		{
			name: "bundle absent is added",
			args: []string{"run", "--detach", "c3"},
			set:  map[string]string{"bundle": "/h"},
			want: "--root /R run --detach --bundle /h -- c3",
			cmd:  "run", id: "c3",
		},
		{
			name:  "exec with an inline command",
			args:  []string{"exec", "-t", "--env", "A=1", "c4", "sh", "-c", "id"},
			extra: []string{"--no-new-privs"},
			tail:  []string{"/dev/hutch", "oci-init", "--", "sh", "-c", "id"},
			want:  "--root /R exec -t --env A=1 --no-new-privs -- c4 /dev/hutch oci-init -- sh -c id",
			cmd:   "exec", id: "c4",
		},
		{
			name: "exec with a process file",
			args: []string{"--root", "/r", "exec", "--process", "/p.json", "--detach", "--pid-file", "/p.pid", "c5"},
			set:  map[string]string{"process": "/proc/self/fd/7"},
			want: "--root /R exec --process /proc/self/fd/7 --detach --pid-file /p.pid -- c5",
			cmd:  "exec", id: "c5",
		},
		{
			// As gVisor's shim (containerd-shim-runsc-v1) calls runsc:
			// global flags inline, runsc's own valued flags.
			name: "runsc shim create",
			args: []string{"--root=/run/containerd/runsc/k8s.io", "--log=/b/log.json", "--log-format=json", "--panic-log=/p", "--hutch-policy-dir=/pol", "create", "--bundle", "/b", "--pid-file", "/b/init.pid", "--user-log", "/u.log", "c7"},
			set:  map[string]string{"bundle": "/h/c7/bundle"},
			want: "--root /R --log=/b/log.json --log-format=json --panic-log=/p create --bundle /h/c7/bundle --pid-file /b/init.pid --user-log /u.log -- c7",
			cmd:  "create", id: "c7",
		},
		{
			name: "runsc shim exec",
			args: []string{"--root=/r", "exec", "--process", "/p.json", "--detach", "--pid-file", "/p.pid", "--internal-pid-file", "/i.pid", "c8"},
			set:  map[string]string{"process": "/proc/self/fd/7"},
			want: "--root /R exec --process /proc/self/fd/7 --detach --pid-file /p.pid --internal-pid-file /i.pid -- c8",
			cmd:  "exec", id: "c8",
		},
		{
			name: "other commands pass",
			args: []string{"--root", "/r", "kill", "--all", "c6", "KILL"},
			want: "--root /R kill --all c6 KILL",
			cmd:  "kill",
		},
		{
			name: "no command",
			args: []string{"--debug"},
			want: "--root /R --debug",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, err := parseCmdline(tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if cl.name() != tc.cmd {
				t.Errorf("command %q, want %q", cl.name(), tc.cmd)
			}
			if tc.id != "" {
				if id, err := cl.id(); err != nil || id != tc.id {
					t.Errorf("id %q %v, want %q", id, err, tc.id)
				}
			}
			if got := strings.Join(cl.rewrite("/R", tc.set, tc.extra, tc.tail), " "); got != tc.want {
				t.Errorf("rewrite:\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestParseCmdlineErrors: a flag that wants a value and has none is an
// error that names it, as is a missing ID.
func TestParseCmdlineErrors(t *testing.T) {
	if _, err := parseCmdline([]string{"--root"}); err == nil || !strings.Contains(err.Error(), "--root") {
		t.Errorf("--root without a value: %v", err)
	}
	if _, err := parseCmdline([]string{"create", "--bundle"}); err == nil || !strings.Contains(err.Error(), "--bundle") {
		t.Errorf("--bundle without a value: %v", err)
	}
	cl, err := parseCmdline([]string{"create", "--bundle", "/b"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.id(); err == nil || !strings.Contains(err.Error(), "ID is missing") {
		t.Errorf("no ID: %v", err)
	}
}

func testSpec() *specs.Spec {
	return &specs.Spec{
		Process: &specs.Process{Args: []string{"sh", "-c", "echo hi"}},
		Root:    &specs.Root{Path: "rootfs"},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "mode=755"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "ro"}},
			{Destination: "/data/", Type: "bind", Source: "vol", Options: []string{"rbind", "rw"}},
			{Destination: "/etc/hosts", Type: "bind", Source: "/abs/hosts", Options: []string{"rbind", "ro"}},
		},
		Linux: &specs.Linux{
			Devices: []specs.LinuxDevice{{Path: "/dev/fuse", Type: "c", Major: 10, Minor: 229}},
			Seccomp: &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{{Names: []string{"read"}, Action: specs.ActAllow}}},
		},
	}
}

// TestHarden: the rewritten configuration runs hutch's init ahead of the
// process with no_new_privs, binds the init read-only, allows the calls
// the init confines itself with, makes the bundle's relative paths
// absolute, adds the hooks, and the confinement grants writes exactly
// where the spec's mounts are writable.
func TestHarden(t *testing.T) {
	o := Options{Binary: "/usr/bin/hutch-runc", StateDir: "/run/hutch-runc/hutch/c1"}
	t.Run("read-only root", func(t *testing.T) {
		s := testSpec()
		s.Root.Readonly = true
		c, err := Harden(s, "/bundle", o)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"/proc", "/dev", "/data"}; !reflect.DeepEqual(c.Writable, want) {
			t.Errorf("writable %q, want %q", c.Writable, want)
		}
		if !slices.Contains(c.Devices, "/dev/fuse") || !slices.Contains(c.Devices, "/dev/null") {
			t.Errorf("devices %q lack the spec's or the defaults", c.Devices)
		}
		if s.Root.Path != "/bundle/rootfs" || s.Mounts[3].Source != "/bundle/vol" || s.Mounts[4].Source != "/abs/hosts" || s.Mounts[0].Source != "proc" {
			t.Errorf("paths: root %q mounts %+v", s.Root.Path, s.Mounts)
		}
		want := append(c.InitArgs(), "sh", "-c", "echo hi")
		if !reflect.DeepEqual(s.Process.Args, want) || !s.Process.NoNewPrivileges {
			t.Errorf("process %q nnp %v", s.Process.Args, s.Process.NoNewPrivileges)
		}
		last := s.Mounts[len(s.Mounts)-1]
		if last.Destination != InitPath || last.Source != o.Binary || !slices.Contains(last.Options, "ro") {
			t.Errorf("init mount %+v", last)
		}
		sc := s.Linux.Seccomp.Syscalls
		if got := sc[len(sc)-1]; got.Action != specs.ActAllow || !slices.Contains(got.Names, "landlock_restrict_self") {
			t.Errorf("seccomp rules %+v", sc)
		}
		if len(s.Hooks.CreateRuntime) != 1 || len(s.Hooks.Poststop) != 1 || s.Hooks.Poststop[0].Path != o.Binary || s.Hooks.Poststop[0].Args[len(s.Hooks.Poststop[0].Args)-1] != o.StateDir {
			t.Errorf("hooks %+v", s.Hooks)
		}
		got, argv, err := parseInitArgs(s.Process.Args[1:][1:])
		if err != nil || !reflect.DeepEqual(got, c) || !reflect.DeepEqual(argv, []string{"sh", "-c", "echo hi"}) {
			t.Errorf("init args read back %+v %q %v", got, argv, err)
		}
	})
	t.Run("writable root", func(t *testing.T) {
		s := testSpec()
		s.Linux.Seccomp = &specs.LinuxSeccomp{DefaultAction: specs.ActAllow}
		c, err := Harden(s, "/bundle", o)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(c.Writable, []string{"/"}) {
			t.Errorf("writable %q, want /", c.Writable)
		}
		if len(s.Linux.Seccomp.Syscalls) != 0 {
			t.Errorf("a filter that allows by default got rules: %+v", s.Linux.Seccomp.Syscalls)
		}
	})
	t.Run("bad", func(t *testing.T) {
		for name, mutate := range map[string]func(*specs.Spec){
			"process.args is empty": func(s *specs.Spec) { s.Process.Args = nil },
			"root.path is empty":    func(s *specs.Spec) { s.Root = nil },
			"no linux section":      func(s *specs.Spec) { s.Linux = nil },
			"is not absolute":       func(s *specs.Spec) { s.Mounts[0].Destination = "proc" },
		} {
			s := testSpec()
			mutate(s)
			if _, err := Harden(s, "/bundle", o); err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%s: %v", name, err)
			}
		}
	})
}

// TestParseInitArgs: the init refuses a command line it did not make.
func TestParseInitArgs(t *testing.T) {
	for _, args := range [][]string{
		{"--write", "/"},
		{"--write", "relative", "--", "sh"},
		{"--"},
		{"--", ""},
		{"--bogus", "--", "sh"},
		{"--device"},
	} {
		if _, _, err := parseInitArgs(args); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

// TestValidNames: container IDs and policy names that would walk out of
// hutch-runc's directories are refused.
func TestValidNames(t *testing.T) {
	for id, ok := range map[string]bool{"abc": true, "a.b_c+d-1": true, "": false, ".": false, "..": false, "a/b": false, "a b": false, "../x": false} {
		if validID(id) != ok {
			t.Errorf("validID(%q) = %v", id, !ok)
		}
	}
	for name, ok := range map[string]bool{"default": true, "web.v2_x-1": true, "": false, ".hidden": false, "-x": false, "a/b": false, "..": false, strings.Repeat("a", 129): false} {
		if validPolicyName(name) != ok {
			t.Errorf("validPolicyName(%q) = %v", name, !ok)
		}
	}
}
