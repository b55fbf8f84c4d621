package policy

import (
	"bytes"
	"fmt"

	"gopkg.in/yaml.v3"
)

// The shapes Format prints: Spec's fields under the same names, with sizes
// and the timeout as text. A test checks the names against Spec's tags.
type (
	formatSpec struct {
		Root       string           `yaml:"root,omitempty"`
		Tier       string           `yaml:"tier,omitempty"`
		Filesystem formatFilesystem `yaml:"filesystem"`
		Network    formatNetwork    `yaml:"network"`
		Secrets    []Secret         `yaml:"secrets"`
		Env        formatEnv        `yaml:"env"`
		Resources  formatResources  `yaml:"resources"`
		Approvals  Approvals        `yaml:"approvals,omitempty"`
		BestEffort bool             `yaml:"best_effort"`
	}
	formatFilesystem struct {
		Workspace       string   `yaml:"workspace,omitempty"`
		WorkspaceAt     string   `yaml:"workspace_at,omitempty"`
		AllowWrite      []string `yaml:"allow_write"`
		DenyRead        []string `yaml:"deny_read"`
		AllowRead       []string `yaml:"allow_read"`
		DenyWrite       []string `yaml:"deny_write"`
		NoDefaultDenies bool     `yaml:"no_default_denies"`
		Home            string   `yaml:"home,omitempty"`
		WorkspaceMode   string   `yaml:"workspace_mode,omitempty"`
	}
	formatNetwork struct {
		Mode           string       `yaml:"mode,omitempty"`
		AllowedDomains []string     `yaml:"allowed_domains"`
		DeniedDomains  []string     `yaml:"denied_domains"`
		AllowedCIDRs   []string     `yaml:"allowed_cidrs"`
		AllowPrivate   []string     `yaml:"allow_private"`
		PrivateNames   []string     `yaml:"private_names,omitempty"`
		Hosts          []string     `yaml:"hosts"`
		AllowHost      *bool        `yaml:"allow_host,omitempty"`
		Headers        []HeaderRule `yaml:"headers,omitempty"`
		OnUnknown      string       `yaml:"on_unknown,omitempty"`
	}
	formatEnv struct {
		Pass []string          `yaml:"pass"`
		Set  map[string]string `yaml:"set"`
	}
	formatResources struct {
		Memory  string  `yaml:"memory,omitempty"`
		CPUs    float64 `yaml:"cpus,omitempty"`
		Pids    int64   `yaml:"pids,omitempty"`
		Timeout string  `yaml:"timeout,omitempty"`
		TmpSize string  `yaml:"tmp_size,omitempty"`
		Disk    string  `yaml:"disk,omitempty"`
	}
)

// Format prints s as a YAML policy file with the same field names Load
// reads: sizes as FormatSize prints them ("512m"), the timeout as a
// duration ("30s"), empty lists as [], and zero resources (no limit)
// omitted. Load of the output gives back s.
func (s Spec) Format() ([]byte, error) {
	r := s.Resources
	f := formatSpec{
		Root: s.Root,
		Tier: s.Tier,
		Filesystem: formatFilesystem{
			Workspace:       s.Filesystem.Workspace,
			WorkspaceAt:     s.Filesystem.WorkspaceAt,
			AllowWrite:      s.Filesystem.AllowWrite,
			DenyRead:        s.Filesystem.DenyRead,
			AllowRead:       s.Filesystem.AllowRead,
			DenyWrite:       s.Filesystem.DenyWrite,
			NoDefaultDenies: s.Filesystem.NoDefaultDenies,
			Home:            s.Filesystem.Home,
			WorkspaceMode:   s.Filesystem.WorkspaceMode,
		},
		Network: formatNetwork{
			Mode:           s.Network.Mode,
			AllowedDomains: s.Network.AllowedDomains,
			DeniedDomains:  s.Network.DeniedDomains,
			AllowedCIDRs:   s.Network.AllowedCIDRs,
			AllowPrivate:   s.Network.AllowPrivate,
			PrivateNames:   s.Network.PrivateNames,
			Hosts:          s.Network.Hosts,
			AllowHost:      s.Network.AllowHost,
			Headers:        s.Network.Headers,
			OnUnknown:      s.Network.OnUnknown,
		},
		Secrets:    s.Secrets,
		Env:        formatEnv{Pass: s.Env.Pass, Set: s.Env.Set},
		Resources:  formatResources{CPUs: r.CPUs, Pids: r.Pids},
		Approvals:  s.Approvals,
		BestEffort: s.BestEffort,
	}
	if r.MemoryBytes != 0 {
		f.Resources.Memory = FormatSize(r.MemoryBytes)
	}
	if r.TmpBytes != 0 {
		f.Resources.TmpSize = FormatSize(r.TmpBytes)
	}
	if r.DiskBytes != 0 {
		f.Resources.Disk = FormatSize(r.DiskBytes)
	}
	if r.Timeout != 0 {
		f.Resources.Timeout = formatTimeout(r.Timeout)
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(f); err != nil {
		return nil, fmt.Errorf("format policy: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("format policy: %w", err)
	}
	// What the home mode means, said where it is set: a home that looks
	// like the user's but keeps nothing surprises the most.
	out := buf.Bytes()
	if note := homeNote(s.Filesystem.Home); note != "" {
		line := []byte("\n  home: " + s.Filesystem.Home + "\n")
		out = bytes.Replace(out, line, []byte("\n  home: "+s.Filesystem.Home+" # "+note+"\n"), 1)
	}
	return out, nil
}

// homeNote explains a home mode in a line.
func homeNote(mode string) string {
	switch mode {
	case "ro":
		return "your home, read-only (credentials hidden); what the sandbox writes there is dropped at its end"
	case "tmp":
		return "an empty home of the sandbox's own, dropped at its end"
	case "persist":
		return "a home of the sandbox's own, kept for this workspace under ~/.local/state/hutch/homes"
	}
	return ""
}
