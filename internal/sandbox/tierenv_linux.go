package sandbox

// What another tier's sandbox needs to look like this tier's to the
// command: the proxy's variables, the trust bundle's places and the
// resolver's configuration.

// ProxyEnviron returns env with the proxy's variables set as in this
// tier: in network mode "proxy" ProxyEnv, in mode "none" (a proxy that
// refuses everything) the same without GIT_SSH_COMMAND; what the caller
// passed under those names is dropped.
func ProxyEnviron(env []string, mode string) []string {
	return append(withoutVars(env, proxyEnvVars), proxyEnv(mode == "proxy")...)
}

// TrustBundle returns where the sandbox's trust bundle (Config.CABundle)
// goes in a view of root (the system bundles that exist there; created
// says the one path is made for it), and env with the variables that
// point TLS clients at it.
func TrustBundle(root string, env []string) (paths []string, created bool, out []string) {
	targets, vars := trustBundleTargets(root)
	for _, t := range targets {
		paths = append(paths, t.path)
		created = created || t.create
	}
	return paths, created, append(withoutVars(env, trustEnvVars), vars...)
}

// ResolvConf is the sandbox's /etc/resolv.conf when hutch answers its
// name lookups on 127.0.0.1:53.
const ResolvConf = resolvConf
