// Package daemon is the core of `hutch serve`: it keeps long-lived
// sandboxes for tenants — creates them from a policy (sandbox.Start, with
// hutch's agent as PID 1), runs commands and file operations in them
// through their agents, expires them (timeout, idle timeout), and records
// them in the store so that nothing is left unaccounted for. Package api
// puts it on HTTP.
package daemon

import (
	"errors"
	"time"

	"github.com/hutch-sandbox/hutch/internal/policy"
)

// Category errors; package api maps them to HTTP statuses in one place.
var (
	ErrNotFound    = errors.New("not found")   // no such sandbox for this tenant
	ErrInvalid     = errors.New("invalid")     // bad request: policy, path, arguments
	ErrConflict    = errors.New("conflict")    // the sandbox's state does not allow it
	ErrQuota       = errors.New("quota")       // the tenant's quota is used up
	ErrUnavailable = errors.New("unavailable") // the daemon is shutting down
)

// Config is a daemon's configuration.
type Config struct {
	// StateDir holds the store (state.db), the audit log and one
	// directory per sandbox (its workspace).
	StateDir string
	// DefaultTimeout and MaxTimeout bound a sandbox's life (5 minutes and
	// 24 hours when zero).
	DefaultTimeout, MaxTimeout time.Duration
	// MaxSandboxes is the most sandboxes a tenant may have at once (0:
	// 100).
	MaxSandboxes int
}

// CreateRequest is what a tenant asks for.
type CreateRequest struct {
	// Policy is the sandbox's policy (the policy-file schema); its
	// workspace is replaced by the sandbox's own directory.
	Policy policy.Spec
	// Labels are the tenant's own key/value tags, for listing.
	Labels map[string]string
	// Env is added to the environment of every command.
	Env map[string]string
	// Timeout is the sandbox's lifetime (DefaultTimeout when zero).
	Timeout time.Duration
	// IdleTimeout, when positive, ends the sandbox after that long
	// without an exec, stdin or file call.
	IdleTimeout time.Duration
}

// Info describes a sandbox.
type Info struct {
	ID        string            `json:"id"`
	Tenant    string            `json:"tenant"`
	State     string            `json:"state"`
	Labels    map[string]string `json:"labels,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	ExpiresAt time.Time         `json:"expires_at"`
	// Workspace is the commands' working directory in the sandbox.
	Workspace string `json:"workspace"`
}
