package policy

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestBuildEnv(t *testing.T) {
	host := []string{
		"PATH=/usr/bin:/bin",
		"HOME=/home/u",
		"LANG=en_US.UTF-8",
		"LC_ALL=C.UTF-8",
		"LC_TIME=de_DE.UTF-8",
		"TERM=xterm-256color",
		"SSH_AUTH_SOCK=/run/user/1000/ssh-agent",
		"DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/1000/bus",
		"GITHUB_TOKEN=ghp_secret",
		"AWS_SECRET_ACCESS_KEY=aws-secret",
		"ANTHROPIC_API_KEY=sk-ant-secret",
		"PWD=/home/u/src",
		"GOPATH=/home/u/go",
		"MYAPP_MODE=dev",
		"MYAPP_LEVEL=3",
		"MYAPPX=no",
		"PATH=/evil", // a second PATH: the first wins
		"NOEQUALS",
		"=nameless",
	}
	tests := []struct {
		name string
		env  Env
		want []string
	}{
		{
			name: "safe list only",
			want: []string{
				"HOME=/home/u",
				"LANG=en_US.UTF-8",
				"LC_ALL=C.UTF-8",
				"LC_TIME=de_DE.UTF-8",
				"PATH=/usr/bin:/bin",
				"TERM=xterm-256color",
			},
		},
		{
			name: "pass names and prefixes, set overrides",
			env: Env{
				Pass: []string{"GOPATH", "MYAPP_*", "NOT_SET"},
				Set:  map[string]string{"MYAPP_MODE": "test", "CI": "1", "PATH": "/sandbox/bin"},
			},
			want: []string{
				"CI=1",
				"GOPATH=/home/u/go",
				"HOME=/home/u",
				"LANG=en_US.UTF-8",
				"LC_ALL=C.UTF-8",
				"LC_TIME=de_DE.UTF-8",
				"MYAPP_LEVEL=3",
				"MYAPP_MODE=test",
				"PATH=/sandbox/bin",
				"TERM=xterm-256color",
			},
		},
		{
			name: "a bare star passes nothing",
			env:  Env{Pass: []string{"*"}},
			want: []string{
				"HOME=/home/u",
				"LANG=en_US.UTF-8",
				"LC_ALL=C.UTF-8",
				"LC_TIME=de_DE.UTF-8",
				"PATH=/usr/bin:/bin",
				"TERM=xterm-256color",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := BuildEnv(tt.env, host)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("BuildEnv\n got: %q\nwant: %q", got, tt.want)
			}
			for _, kv := range got {
				for _, secret := range []string{"SSH_AUTH_SOCK", "DBUS_SESSION_BUS_ADDRESS", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "ANTHROPIC_API_KEY", "PWD"} {
					if strings.HasPrefix(kv, secret+"=") {
						t.Errorf("BuildEnv passed %s", kv)
					}
				}
			}
		})
	}
}

func TestDefaultDenyRead(t *testing.T) {
	got := DefaultDenyRead("/home/u")
	for _, want := range []string{
		"/home/u/.ssh", "/home/u/.aws", "/home/u/.config/gcloud", "/home/u/.git-credentials",
		"/home/u/.bash_history", "/home/u/.env", "/home/u/.config/containers/auth.json",
		"/run/user", "/var/run/docker.sock", "/run/containerd", "/tmp/.X11-unix",
		"/etc/shadow", "/etc/ssh/ssh_host_ed25519_key",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("DefaultDenyRead lacks %s", want)
		}
	}
	for _, p := range got {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			t.Errorf("DefaultDenyRead entry %q is not clean and absolute", p)
		}
	}
	if dup := len(got) - len(dedupe(got)); dup != 0 {
		t.Errorf("DefaultDenyRead has %d duplicates", dup)
	}

	for _, home := range []string{"", "relative/home"} {
		noHome := DefaultDenyRead(home)
		var system []string
		for _, g := range systemDenyRead {
			system = append(system, g.Paths...)
		}
		if !reflect.DeepEqual(noHome, system) {
			t.Errorf("DefaultDenyRead(%q) = %v, want the system entries only", home, noHome)
		}
	}
}

func TestDefaultDenyWrite(t *testing.T) {
	names := DefaultDenyWrite()
	var got []string
	for _, n := range names {
		got = append(got, n.Name)
		if n.Why == "" {
			t.Errorf("DefaultDenyWrite entry %q does not say what runs it", n.Name)
		}
	}
	if dup := len(got) - len(dedupe(got)); dup != 0 {
		t.Errorf("DefaultDenyWrite has %d duplicates", dup)
	}
	for _, want := range []string{".bashrc", ".zshrc", ".profile", ".git/hooks", ".git/config", GitDirName, ".vscode", ".mcp.json", ".claude", ".ssh/authorized_keys"} {
		if !slices.Contains(got, want) {
			t.Errorf("DefaultDenyWrite lacks %s", want)
		}
	}
	for _, p := range got {
		if filepath.IsAbs(p) || filepath.Clean(p) != p {
			t.Errorf("DefaultDenyWrite entry %q is not a clean relative name", p)
		}
	}
	names[0].Name = "changed"
	if DefaultDenyWrite()[0].Name == "changed" {
		t.Error("DefaultDenyWrite returns its internal slice")
	}
}

var update = flag.Bool("update", false, "rewrite the README's list of defaults")

// TestREADMEDefaults: the README documents the default lists as they are
// (go test ./internal/policy -run README -update rewrites them).
func TestREADMEDefaults(t *testing.T) {
	const begin, end = "<!-- defaults:begin -->\n", "<!-- defaults:end -->"
	path := filepath.Join("..", "..", "README.md")
	readme, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(readme)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("README.md lacks the %q and %q markers", begin, end)
	}
	want := "\n" + DefaultsMarkdown() + "\n"
	if got := s[i+len(begin) : j]; got != want {
		if *update {
			if err := os.WriteFile(path, []byte(s[:i+len(begin)]+want+s[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("README.md's list of defaults is out of date: run go test ./internal/policy -run README -update")
	}
}
