package microvm

import (
	"fmt"
	"os"

	"github.com/hutch-sandbox/hutch/internal/microvm/guest"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// relayed tells whether the guest of c relays its proxy addresses to
// hutch's egress proxy: in network mode "proxy" only.
func relayed(c sandbox.Config) bool {
	return c.Spec.Network.Mode == "proxy" && c.Proxy != nil
}

// netFiles makes the guest's root look like the other tiers' views in
// network mode "proxy" and returns the commands' environment: hutch's
// resolv.conf (name lookups go to the relayed 127.0.0.1:53), the trust
// bundle (c.CABundle) over the system bundles, both files for the
// guest's init to write into the root's writable layer in the guest's
// memory (the host's files stay as they are), and the proxy's and the
// bundle's variables over env.
func netFiles(c sandbox.Config, env []string) ([]guest.File, []string, error) {
	files := []guest.File{{Path: "/etc/resolv.conf", Data: []byte(sandbox.ResolvConf), Mode: 0o644}}
	env = sandbox.ProxyEnviron(env, "proxy")
	if c.CABundle == "" {
		return files, env, nil
	}
	b, err := os.ReadFile(c.CABundle)
	if err != nil {
		return nil, nil, fmt.Errorf("trust bundle: %w", err)
	}
	// The guest's root is the host's system directories: the host's
	// bundles are where the guest's are.
	paths, _, env := sandbox.TrustBundle("/", env)
	for _, p := range paths {
		files = append(files, guest.File{Path: p, Data: b, Mode: 0o644})
	}
	return files, env, nil
}
