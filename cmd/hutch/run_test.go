package main

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestStreams(t *testing.T) {
	t.Parallel()
	big := make([]byte, 1<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name           string
		args           []string
		stdin          []byte
		stdout, stderr string
	}{
		{name: "stdin to stdout", args: []string{"--", "cat"}, stdin: []byte("hello\nworld\n"), stdout: "hello\nworld\n"},
		{name: "binary data round trip", args: []string{"--", "cat"}, stdin: big, stdout: string(big)},
		{name: "stderr kept apart", args: sh("echo out; echo err >&2"), stdout: "out\n", stderr: "err\n"},
		{name: "stdin to stderr", args: sh("cat >&2"), stdin: []byte("to stderr\n"), stderr: "to stderr\n"},
		{name: "no stdin", args: sh("cat; echo done"), stdout: "done\n"},
		{name: "arguments passed verbatim", args: []string{"--", "printf", "[%s]\n", "a b", "", "$HOME", "*", "--x"}, stdout: "[a b]\n[]\n[$HOME]\n[*]\n[--x]\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			inv := invocation{args: tc.args}
			if tc.stdin != nil {
				inv.stdin = bytes.NewReader(tc.stdin)
			}
			r := sandboxed(t, inv)
			wantOK(t, r)
			if r.stdout != tc.stdout {
				if len(r.stdout) > 200 {
					t.Errorf("stdout: got %d bytes, want %d (different)", len(r.stdout), len(tc.stdout))
				} else {
					t.Errorf("stdout: got %q, want %q", r.stdout, tc.stdout)
				}
			}
			if r.stderr != tc.stderr {
				t.Errorf("stderr: got %q, want %q", r.stderr, tc.stderr)
			}
		})
	}
}

// TestEnvironment checks that the sandbox gets only safe variables, the ones
// set with --env and those passed with --pass-env.
func TestEnvironment(t *testing.T) {
	t.Parallel()
	secrets := []string{
		"SSH_AUTH_SOCK=/run/user/0/ssh-agent.sock",
		"DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/0/bus",
		"GITHUB_TOKEN=ghp_secret",
		"AWS_SECRET_ACCESS_KEY=aws-secret",
		"ANTHROPIC_API_KEY=sk-ant-secret",
		"FOO=foo-value",
		"MY_ONE=1",
		"MY_TWO=2",
		"MYSELF=no",
	}
	tests := []struct {
		name    string
		flags   []string
		want    []string // NAME=VALUE entries that must be present
		notWant []string // names that must be absent
	}{
		{
			name:    "defaults",
			want:    []string{"PATH=" + stdPath, "LANG=C.UTF-8", "TERM=xterm"},
			notWant: []string{"SSH_AUTH_SOCK", "DBUS_SESSION_BUS_ADDRESS", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "ANTHROPIC_API_KEY", "FOO", "MY_ONE", "MY_TWO", "MYSELF"},
		},
		{
			name:    "--env sets",
			flags:   []string{"--env", "A=B", "--env", "EMPTY=", "--env", "EQ=x=y"},
			want:    []string{"A=B", "EMPTY=", "EQ=x=y"},
			notWant: []string{"FOO", "GITHUB_TOKEN"},
		},
		{
			name:    "--env overrides a passed variable",
			flags:   []string{"--env", "LANG=C"},
			want:    []string{"LANG=C"},
			notWant: []string{"FOO"},
		},
		{
			name:    "--pass-env passes one",
			flags:   []string{"--pass-env", "FOO"},
			want:    []string{"FOO=foo-value"},
			notWant: []string{"GITHUB_TOKEN", "MY_ONE", "ANTHROPIC_API_KEY"},
		},
		{
			name:    "--pass-env prefix",
			flags:   []string{"--pass-env", "MY_*"},
			want:    []string{"MY_ONE=1", "MY_TWO=2"},
			notWant: []string{"MYSELF", "FOO"},
		},
		{
			name:    "--pass-env of an unset variable",
			flags:   []string{"--pass-env", "NOT_SET_ANYWHERE"},
			notWant: []string{"NOT_SET_ANYWHERE", "FOO"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ws := t.TempDir()
			env := append(baseEnv(ws), "TERM=xterm")
			env = append(env, secrets...)
			r := sandboxed(t, invocation{args: append(tc.flags, "--", "env"), dir: ws, env: env})
			wantOK(t, r)
			got := lines(r.stdout)
			for _, w := range append(tc.want, "HOME="+ws) {
				if !slices.Contains(got, w) {
					t.Errorf("%s missing from the sandbox's environment:\n%s", w, r.stdout)
				}
			}
			for _, name := range tc.notWant {
				for _, kv := range got {
					if strings.HasPrefix(kv, name+"=") {
						t.Errorf("%s leaked into the sandbox", kv)
					}
				}
			}
			if strings.Contains(r.stdout, "secret") {
				t.Errorf("a secret value reached the sandbox:\n%s", r.stdout)
			}
		})
	}
}

// TestIsolation checks what a command sees of the host.
func TestIsolation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		args   []string
		stdout string
	}{
		{name: "hostname", args: []string{"--", "hostname"}, stdout: "hutch\n"},
		{name: "pid 1 is hutch's init", args: sh(`tr -d '\0' < /proc/1/cmdline; echo`), stdout: "hutch:init\n"},
		{name: "network has only lo", args: sh(`tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '`), stdout: "lo\n"},
		{name: "minimal /dev", args: sh("ls -A /dev | tr '\n' ' '"), stdout: "fd full null ptmx pts random shm stderr stdin stdout tty urandom zero "},
		{name: "no capabilities", args: sh("grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status | cut -f2 | sort -u"), stdout: "0000000000000000\n"},
		{name: "no_new_privs", args: sh("grep NoNewPrivs /proc/self/status | cut -f2"), stdout: "1\n"},
		{name: "seccomp filter", args: sh("grep '^Seccomp:' /proc/self/status | cut -f2"), stdout: "2\n"},
		{name: "host root is read-only", args: sh("touch /etc/hutch-test 2>&1 | grep -c 'Read-only file system'"), stdout: "1\n"},
		{name: "usr is read-only", args: sh("mkdir /usr/hutch-test 2>&1 | grep -c 'Read-only file system'"), stdout: "1\n"},
		{name: "/tmp is writable", args: sh("echo x > /tmp/f && cat /tmp/f"), stdout: "x\n"},
		{name: "/dev/shm is writable", args: sh("echo x > /dev/shm/f && cat /dev/shm/f"), stdout: "x\n"},
		{name: "/dev/null works", args: sh("echo x > /dev/null && head -c 3 /dev/zero | od -An -tx1 | tr -d ' '"), stdout: "000000\n"},
		{name: "cannot mount", args: sh("mount -t tmpfs none /tmp 2>/dev/null; echo $?"), stdout: "32\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := sandboxed(t, invocation{args: tc.args})
			wantOK(t, r)
			if r.stdout != tc.stdout {
				t.Errorf("got %q, want %q (stderr %q)", r.stdout, tc.stdout, r.stderr)
			}
		})
	}
}

// TestProcesses checks that the sandbox sees its own processes only, under
// hutch's init as PID 1.
func TestProcesses(t *testing.T) {
	t.Parallel()
	r := sandboxed(t, invocation{args: sh(`ls -d /proc/[0-9]* | wc -l`)})
	wantOK(t, r)
	n, err := strconv.Atoi(strings.TrimSpace(r.stdout))
	if err != nil {
		t.Fatalf("process count %q: %v", r.stdout, err)
	}
	// init, sh, ls and wc, and nothing of the host's.
	if n < 2 || n > 8 {
		t.Errorf("the sandbox sees %d processes, want only its own few", n)
	}
}

// TestPrivateTmp checks that the sandbox's /tmp is its own: it holds
// nothing of the host's and nothing written there reaches the host.
func TestPrivateTmp(t *testing.T) {
	t.Parallel()
	// A workspace outside /tmp, so that /tmp holds no mount point for it.
	ws := hostDir(t)
	hostFile, err := os.CreateTemp("/tmp", "hutch-host-file-")
	if err != nil {
		t.Fatal(err)
	}
	hostFile.Close()
	t.Cleanup(func() { os.Remove(hostFile.Name()) })
	inside := filepath.Join("/tmp", "hutch-written-inside-"+filepath.Base(ws))
	t.Cleanup(func() { os.Remove(inside) })

	script := `ls -A /tmp | wc -l; test -e "$1" && echo host file visible; echo hi > "$2" && cat "$2"; stat -c %a /tmp`
	r := sandboxed(t, invocation{dir: ws, args: []string{"--", "sh", "-c", script, "sh", hostFile.Name(), inside}})
	wantOK(t, r)
	if want := "0\nhi\n1777\n"; r.stdout != want {
		t.Errorf("got %q, want %q (stderr %q)", r.stdout, want, r.stderr)
	}
	if _, err := os.Stat(inside); err == nil {
		t.Errorf("%s, written in the sandbox's /tmp, appeared on the host", inside)
	}
}

// TestFilesystemFlags checks --workspace, --allow-write, --deny-read,
// --allow-read and --deny-write as a user would use them.
func TestFilesystemFlags(t *testing.T) {
	t.Parallel()

	t.Run("workspace is the working directory and writable", func(t *testing.T) {
		t.Parallel()
		ws := t.TempDir()
		r := sandboxed(t, invocation{args: sh("pwd; echo data > out.txt", "--workspace", ws)})
		wantOK(t, r)
		if r.stdout != ws+"\n" {
			t.Errorf("pwd: got %q, want %q", r.stdout, ws)
		}
		if b, err := os.ReadFile(filepath.Join(ws, "out.txt")); err != nil || string(b) != "data\n" {
			t.Errorf("file written in the workspace: %q, %v", b, err)
		}
	})

	t.Run("workspace defaults to the current directory", func(t *testing.T) {
		t.Parallel()
		ws := t.TempDir()
		r := sandboxed(t, invocation{dir: ws, args: sh("pwd")})
		wantOK(t, r)
		if r.stdout != ws+"\n" {
			t.Errorf("pwd: got %q, want %q", r.stdout, ws)
		}
	})

	t.Run("allow-write", func(t *testing.T) {
		t.Parallel()
		extra := hostDir(t)
		other := hostDir(t)
		script := `echo ok > "$1/f" && echo wrote extra; echo no > "$2/f" 2>/dev/null || echo other read-only`
		r := sandboxed(t, invocation{args: []string{"--allow-write", extra, "--", "sh", "-c", script, "sh", extra, other}})
		wantOK(t, r)
		if want := "wrote extra\nother read-only\n"; r.stdout != want {
			t.Errorf("got %q, want %q (stderr %q)", r.stdout, want, r.stderr)
		}
		if b, err := os.ReadFile(filepath.Join(extra, "f")); err != nil || string(b) != "ok\n" {
			t.Errorf("file written to --allow-write dir: %q, %v", b, err)
		}
		if _, err := os.Stat(filepath.Join(other, "f")); err == nil {
			t.Errorf("the sandbox wrote to %s, which it was not allowed to", other)
		}
	})

	t.Run("deny-read", func(t *testing.T) {
		t.Parallel()
		dir := hostDir(t)
		writeFile(t, filepath.Join(dir, "secret.txt"), "secret\n", 0o644)
		writeFile(t, filepath.Join(dir, "public.txt"), "public\n", 0o644)
		writeFile(t, filepath.Join(dir, "hidden", "inner.txt"), "secret\n", 0o644)
		r := sandboxed(t, invocation{args: []string{
			"--deny-read", filepath.Join(dir, "secret.txt"), "--deny-read", filepath.Join(dir, "hidden"),
			"--", "sh", "-c", `cat "$1/public.txt"; cat "$1/secret.txt"; cat "$1/hidden/inner.txt"; ls "$1/hidden"`, "sh", dir,
		}})
		if r.stdout != "public\n" {
			t.Errorf("got %q, want only the public file (stderr %q)", r.stdout, r.stderr)
		}
		if r.code == 0 {
			t.Errorf("reading denied files succeeded: %s", r)
		}
	})

	t.Run("deny-read inside the workspace", func(t *testing.T) {
		t.Parallel()
		ws := t.TempDir()
		writeFile(t, filepath.Join(ws, "secret.txt"), "secret\n", 0o644)
		r := sandboxed(t, invocation{dir: ws, args: []string{"--deny-read", "secret.txt", "--", "cat", "secret.txt"}})
		if r.code == 0 || strings.Contains(r.stdout, "secret") {
			t.Errorf("denied file was read: %s", r)
		}
	})

	// The default deny list hides HOME's credentials; --allow-read gives
	// one of them back. Home is read-only (outside the workspace) or inside
	// the writable workspace.
	for _, where := range []string{"read-only", "in the workspace"} {
		t.Run("default denies and allow-read, home "+where, func(t *testing.T) {
			t.Parallel()
			ws := t.TempDir()
			home := hostDir(t)
			if where == "in the workspace" {
				home = filepath.Join(ws, "home")
			}
			writeFile(t, filepath.Join(home, ".npmrc"), "npm-token\n", 0o644)
			// World-readable: a host file the sandbox's unprivileged host uid may
			// read, so that only the deny lists hide it.
			writeFile(t, filepath.Join(home, ".ssh", "id_ed25519"), "ssh-key\n", 0o644)
			writeFile(t, filepath.Join(home, ".bashrc"), "# rc\n", 0o644)
			env := baseEnv(home)
			script := `cat "$HOME/.npmrc"; cat "$HOME/.ssh/id_ed25519"; cat "$HOME/.bashrc"`

			r := sandboxed(t, invocation{dir: ws, env: env, args: sh(script)})
			if r.stdout != "# rc\n" {
				t.Errorf("default denies: got %q, want only .bashrc (stderr %q)", r.stdout, r.stderr)
			}
			r = sandboxed(t, invocation{dir: ws, env: env, args: sh(script, "--allow-read", "~/.npmrc")})
			if r.stdout != "npm-token\n# rc\n" {
				t.Errorf("--allow-read ~/.npmrc: got %q, want .npmrc and .bashrc (stderr %q)", r.stdout, r.stderr)
			}
			r = sandboxed(t, invocation{dir: ws, env: env, args: sh(script, "--allow-read", filepath.Join(home, ".npmrc"))})
			if r.stdout != "npm-token\n# rc\n" {
				t.Errorf("--allow-read HOME/.npmrc: got %q, want .npmrc and .bashrc (stderr %q)", r.stdout, r.stderr)
			}
			r = sandboxed(t, invocation{dir: ws, env: env, args: sh(script, "--no-default-denies")})
			if r.stdout != "npm-token\nssh-key\n# rc\n" {
				t.Errorf("--no-default-denies: got %q, want every file (stderr %q)", r.stdout, r.stderr)
			}
		})
	}

	t.Run("deny-write inside the workspace", func(t *testing.T) {
		t.Parallel()
		ws := t.TempDir()
		writeFile(t, filepath.Join(ws, "config.json"), "{}\n", 0o644)
		r := sandboxed(t, invocation{dir: ws, args: sh(
			`echo x > config.json 2>/dev/null || echo config protected; echo y > other.txt && echo other written; echo z > .bashrc 2>/dev/null || echo bashrc protected`,
			"--deny-write", "config.json")})
		wantOK(t, r)
		if want := "config protected\nother written\nbashrc protected\n"; r.stdout != want {
			t.Errorf("got %q, want %q (stderr %q)", r.stdout, want, r.stderr)
		}
		if b, _ := os.ReadFile(filepath.Join(ws, "config.json")); string(b) != "{}\n" {
			t.Errorf("protected file changed to %q", b)
		}
		if _, err := os.Lstat(filepath.Join(ws, ".bashrc")); err == nil {
			t.Errorf("a .bashrc was left in the workspace")
		}
	})
}
