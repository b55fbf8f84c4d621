package egress

import (
	"fmt"
	"net/netip"

	"github.com/hutch-sandbox/hutch/internal/policy"
)

// ConfigFromPolicy turns a validated network policy into the proxy's
// configuration (secrets apart: they need their real values).
func ConfigFromPolicy(nw policy.Network) (Config, error) {
	cfg := Config{
		AllowDomains: nw.AllowedDomains,
		DenyDomains:  nw.DeniedDomains,
		AllowCIDRs:   nw.AllowedCIDRs,
	}
	for _, c := range nw.AllowPrivate {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return cfg, fmt.Errorf("network.allow_private: %w", err)
		}
		cfg.AllowPrivate = append(cfg.AllowPrivate, p.Masked())
	}
	for _, c := range nw.PrivateNames {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return cfg, fmt.Errorf("network.private_names: %w", err)
		}
		cfg.PrivateNames = append(cfg.PrivateNames, p.Masked())
	}
	for _, h := range nw.Hosts {
		name, addr, err := policy.SplitHostPin(h)
		if err != nil {
			return cfg, fmt.Errorf("network.hosts: %w", err)
		}
		if cfg.Hosts == nil {
			cfg.Hosts = map[string][]netip.Addr{}
		}
		cfg.Hosts[name] = append(cfg.Hosts[name], addr)
	}
	return cfg, nil
}
