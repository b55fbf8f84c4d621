package daemon

import (
	"encoding/json"
	"path/filepath"
	"slices"

	"github.com/hutch-sandbox/hutch/internal/policy"
)

// DefaultWorkspace is the commands' working directory in a sandbox whose
// policy names none: a directory of its writable root.
const DefaultWorkspace = "/workspace"

// Defaults of Config.DefaultDisk and Config.MaxDisk.
const (
	defaultDisk    = 1 << 30
	defaultMaxDisk = 16 << 30
)

// hiddenDirs are the host directories every sandbox sees empty (and may
// fill, in its own layer): home directories, runtime state, logs, mail and
// spools, backups and private keys. On a host root seen through the
// sandbox's idmapped layer, files only root may read would be readable by
// the sandbox's root, which owns them there; the default deny-read list
// masks the known credential files, and these directories go whole.
var hiddenDirs = []string{
	"/root", "/home", "/run", "/var/run", "/var/tmp", "/var/log", "/var/backups",
	"/var/mail", "/var/spool", "/etc/ssl/private", "/mnt", "/media",
}

// hidden is what every sandbox of m sees empty: hiddenDirs and the daemon's
// state directory (the store, the audit log, the other sandboxes).
func (m *Manager) hidden() []string {
	return append(slices.Clone(hiddenDirs), m.cfg.StateDir)
}

// workspaceOf is the workspace a policy asks for, DefaultWorkspace when it
// names none.
func workspaceOf(p policy.Spec) string {
	if p.Filesystem.Workspace == "" {
		return DefaultWorkspace
	}
	return filepath.Clean(p.Filesystem.Workspace)
}

// specWorkspace is the workspace recorded in a sandbox's stored policy.
func specWorkspace(spec []byte) string {
	var s struct {
		Filesystem struct {
			Workspace string `json:"workspace"`
		} `json:"filesystem"`
	}
	if json.Unmarshal(spec, &s) != nil || s.Filesystem.Workspace == "" {
		return DefaultWorkspace
	}
	return s.Filesystem.Workspace
}
