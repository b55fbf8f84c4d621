package sandbox

import (
	"os"
	"path/filepath"
)

// fallbackBundle is where the bundle goes when the root has none of the
// system's paths: the sandbox's own /dev.
const fallbackBundle = "/dev/hutch-ca.crt"

type bundleTarget struct {
	path   string
	create bool
}

// trustBundleTargets says where the sandbox's trust bundle is bound in a
// view of root ("host" or a directory): over every system bundle the root
// has, else at fallbackBundle; and the variables that point TLS clients at
// it.
func trustBundleTargets(root string) ([]bundleTarget, []string) {
	base := rootDir(root)
	var out []bundleTarget
	for _, p := range systemBundles {
		if fi, err := os.Stat(filepath.Join(base, p)); err == nil && fi.Mode().IsRegular() {
			out = append(out, bundleTarget{path: p})
		}
	}
	if len(out) == 0 {
		out = append(out, bundleTarget{path: fallbackBundle, create: true})
	}
	file := out[0].path
	env := []string{"SSL_CERT_FILE=" + file, "REQUESTS_CA_BUNDLE=" + file, "NODE_EXTRA_CA_CERTS=" + file,
		"CURL_CA_BUNDLE=" + file, "GIT_SSL_CAINFO=" + file}
	return out, env
}
