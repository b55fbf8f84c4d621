package client

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Usage is one sample of what a sandbox used: the daemon samples every
// running sandbox every few seconds and keeps the last hour.
type Usage struct {
	// Time is when it was taken.
	Time time.Time `json:"time"`
	// CPUCount is the CPUs the sandbox may use (its resources.cpus
	// rounded up, else the host's); CPUPercent the CPU time it used since
	// the sample before, as a share of them, in percent.
	CPUCount   int     `json:"cpu_count"`
	CPUPercent float64 `json:"cpu_percent"`
	// MemoryBytes is the memory its cgroup is charged (page cache and its
	// RAM-backed file systems included), MemoryCacheBytes the page cache
	// and tmpfs part of it, MemoryLimit its limit.
	MemoryBytes      int64 `json:"memory_bytes"`
	MemoryCacheBytes int64 `json:"memory_cache_bytes"`
	MemoryLimit      int64 `json:"memory_limit"`
	// DiskBytes is what its writable root holds, DiskLimit its size.
	DiskBytes int64 `json:"disk_bytes"`
	DiskLimit int64 `json:"disk_limit"`
}

// Metrics returns the samples of sandbox id taken from since to until
// (either zero: unbounded), oldest first; none for a sandbox that does
// not run.
func (c *Client) Metrics(ctx context.Context, id string, since, until time.Time) ([]Usage, error) {
	q := url.Values{}
	if !since.IsZero() {
		q.Set("since", since.UTC().Format(time.RFC3339))
	}
	if !until.IsZero() {
		q.Set("until", until.UTC().Format(time.RFC3339))
	}
	var out struct {
		Samples []Usage `json:"samples"`
	}
	if err := c.call(ctx, http.MethodGet, sandboxPath(id, "metrics"), q, nil, &out); err != nil {
		return nil, err
	}
	return out.Samples, nil
}

// Network is the network section of a sandbox's policy (hutch's
// policy-file schema).
type Network struct {
	// Mode is "proxy" (through the sandbox's egress proxy) or "none"
	// (nothing); empty: "proxy" when a domain or range is allowed.
	Mode string `json:"mode,omitempty"`
	// AllowedDomains are the hosts the sandbox may reach ("example.com",
	// "*.example.com", an IP address; ":PORT" or ":*", else 80 and 443;
	// "*" every public host), DeniedDomains those it never may,
	// AllowedCIDRs address ranges it may.
	AllowedDomains []string `json:"allowed_domains,omitempty"`
	DeniedDomains  []string `json:"denied_domains,omitempty"`
	AllowedCIDRs   []string `json:"allowed_cidrs,omitempty"`
	// Hosts pin names to addresses ("NAME:ADDRESS").
	Hosts []string `json:"hosts,omitempty"`
	// AllowPrivate opens ranges the proxy's guard refuses (loopback,
	// private ...): the daemon's operator's only, on its unix socket.
	AllowPrivate []string `json:"allow_private,omitempty"`
}

// UpdateNetwork replaces the egress rules of running sandbox id with n,
// checked as a create's policy: its proxy obeys them from the next
// connection on and closes the open ones they refuse. It returns the
// sandbox's network section as the daemon normalized it.
func (c *Client) UpdateNetwork(ctx context.Context, id string, n Network) (*Network, error) {
	var out struct {
		Network Network `json:"network"`
	}
	if err := c.call(ctx, http.MethodPut, sandboxPath(id, "network"), nil, n, &out); err != nil {
		return nil, err
	}
	return &out.Network, nil
}
