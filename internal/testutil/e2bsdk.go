package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// NodeForE2B returns a node binary recent enough for E2B's SDK (20.18 or
// later): the one scripts/test.sh installs under dir/.node (dir is
// test/e2b), or node on the PATH; "" and why not when there is none.
func NodeForE2B(dir string) (string, string) {
	candidates := []string{filepath.Join(dir, ".node", "node_modules", ".bin", "node")}
	if p, err := exec.LookPath("node"); err == nil {
		candidates = append(candidates, p)
	}
	why := "no node binary (scripts/test.sh installs one)"
	for _, p := range candidates {
		out, err := exec.Command(p, "--version").Output()
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(out))
		m := regexp.MustCompile(`^v(\d+)\.(\d+)\.`).FindStringSubmatch(v)
		if m == nil {
			continue
		}
		major, _ := strconv.Atoi(m[1])
		minor, _ := strconv.Atoi(m[2])
		if major > 20 || (major == 20 && minor >= 18) {
			abs, err := filepath.Abs(p)
			if err != nil {
				return "", err.Error()
			}
			return abs, ""
		}
		why = "node " + v + " is older than 20.18, which E2B's SDK needs (scripts/test.sh installs a newer one)"
	}
	return "", why
}

// E2BSDK returns node for E2B's SDK, the package sdk of dir/node_modules
// (dir is test/e2b; npm ci there installs it if it is missing and npm is
// there), or skips the test without them (fails when HUTCH_TEST_ROOT=1).
func E2BSDK(t testing.TB, dir, sdk string) string {
	t.Helper()
	RequireRoot(t)
	node, why := NodeForE2B(dir)
	Need(t, node != "", why)
	_, err := os.Stat(filepath.Join(dir, "node_modules", sdk, "package.json"))
	if err != nil {
		if npm, lerr := exec.LookPath("npm"); lerr == nil {
			cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund")
			cmd.Dir = dir
			if out, cerr := cmd.CombinedOutput(); cerr != nil {
				t.Logf("npm ci in %s: %v\n%s", dir, cerr, out)
			}
			_, err = os.Stat(filepath.Join(dir, "node_modules", sdk, "package.json"))
		}
	}
	Need(t, err == nil, "E2B's SDK ("+sdk+") is not installed in "+dir+"/node_modules (npm ci there; scripts/test.sh does)")
	return node
}
