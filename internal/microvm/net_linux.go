package microvm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// relayed tells whether the guest of c relays its proxy addresses to
// hutch's egress proxy: in network mode "proxy" only.
func relayed(c sandbox.Config) bool {
	return c.Spec.Network.Mode == "proxy" && c.Proxy != nil
}

// guestNet makes the guest's root look like the other tiers' views in
// network mode "proxy" and returns the command's environment: hutch's
// resolv.conf (name lookups go to the relayed 127.0.0.1:53), the trust
// bundle (c.CABundle) over the system bundles, both written by the agent
// into the root's writable layer in the guest's memory (the host's files
// stay as they are), and the proxy's and the bundle's variables.
func guestNet(ctx context.Context, client *agent.Client, c sandbox.Config) ([]string, error) {
	// A link (to systemd-resolved's file, say) is replaced by the file.
	if _, err := client.WriteFile(ctx, "/etc/resolv.conf", bytes.NewReader([]byte(sandbox.ResolvConf)), 0o644); err != nil {
		return nil, fmt.Errorf("the guest's resolv.conf: %w", err)
	}
	env := sandbox.ProxyEnviron(c.Environ, "proxy")
	if c.CABundle == "" {
		return env, nil
	}
	b, err := os.ReadFile(c.CABundle)
	if err != nil {
		return nil, fmt.Errorf("trust bundle: %w", err)
	}
	// The guest's root is the host's system directories: the host's
	// bundles are where the guest's are.
	paths, created, env := sandbox.TrustBundle("/", env)
	for _, p := range paths {
		if created {
			if err := client.Mkdir(ctx, path.Dir(p), true); err != nil {
				return nil, fmt.Errorf("the guest's trust bundle %s: %w", p, err)
			}
		}
		if _, err := client.WriteFile(ctx, p, bytes.NewReader(b), 0o644); err != nil {
			return nil, fmt.Errorf("the guest's trust bundle %s: %w", p, err)
		}
	}
	return env, nil
}
