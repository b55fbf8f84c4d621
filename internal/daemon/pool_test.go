package daemon

import (
	"testing"

	"github.com/hutch-sandbox/hutch/internal/policy"
)

func TestWarmMatch(t *testing.T) {
	for _, c := range []struct {
		name string
		r    CreateRequest
		want bool
	}{
		{"empty", CreateRequest{}, true},
		{"labels, env and timeouts", CreateRequest{Labels: map[string]string{"a": "b"}, Env: map[string]string{"X": "1"}, Timeout: 1, IdleTimeout: 1}, true},
		{"defaults spelled out", CreateRequest{Policy: policy.Spec{
			Root:       policy.DefaultRoot,
			Filesystem: policy.Filesystem{Workspace: DefaultWorkspace, DenyRead: []string{}},
			Network:    policy.Network{Mode: policy.DefaultNetworkMode, AllowedDomains: []string{}},
			Resources:  policy.Resources{Pids: policy.DefaultPids},
		}}, true},
		{"HOME", CreateRequest{Env: map[string]string{"HOME": "/root"}}, false},
		{"allowed domain", CreateRequest{Policy: policy.Spec{Network: policy.Network{AllowedDomains: []string{"example.com"}}}}, false},
		{"memory", CreateRequest{Policy: policy.Spec{Resources: policy.Resources{MemoryBytes: 1 << 28}}}, false},
		{"policy timeout", CreateRequest{Policy: policy.Spec{Resources: policy.Resources{Timeout: 1}}}, false},
		{"workspace", CreateRequest{Policy: policy.Spec{Filesystem: policy.Filesystem{Workspace: "/src"}}}, false},
		{"env.set", CreateRequest{Policy: policy.Spec{Env: policy.Env{Set: map[string]string{"A": "1"}}}}, false},
		{"deny read", CreateRequest{Policy: policy.Spec{Filesystem: policy.Filesystem{DenyRead: []string{"/etc"}}}}, false},
	} {
		if got := warmMatch(c.r); got != c.want {
			t.Errorf("%s: warmMatch = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestWarmConfig(t *testing.T) {
	for _, c := range []struct {
		cfg Config
		ok  bool
	}{
		{Config{StateDir: "/x", Warm: 0}, true},
		{Config{StateDir: "/x", Warm: 100}, true},
		{Config{StateDir: "/x", Warm: -1}, false},
		{Config{StateDir: "/x", Warm: MaxWarm + 1, MaxSandboxes: 2000}, false},
		{Config{StateDir: "/x", Warm: 5, MaxSandboxes: 4}, false},
	} {
		err := c.cfg.withDefaults()
		if (err == nil) != c.ok {
			t.Errorf("warm %d, max sandboxes %d: %v", c.cfg.Warm, c.cfg.MaxSandboxes, err)
		}
	}
}
