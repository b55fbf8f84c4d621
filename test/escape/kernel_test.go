//go:build linux

package escape

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestGVisorKernel: under the gVisor tier the sandbox sees gVisor's kernel,
// not the host's: uname -r and uname -v, /proc/version and the kernel's
// log (dmesg) are gVisor's, and none names the host's release or version.
// The same script under the namespace tier shows the host's release, so the
// check can fail: a gVisor run that silently ran on the host's kernel would.
func TestGVisorKernel(t *testing.T) {
	testutil.RequireRoot(t)
	t.Parallel()
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		t.Fatal(err)
	}
	hostRelease := unix.ByteSliceToString(uts.Release[:])
	hostVersion := unix.ByteSliceToString(uts.Version[:])
	const script = `echo "RELEASE $(uname -r)"; echo "VERSION $(uname -v)"; echo "PROC $(cat /proc/version)"; dmesg 2>&1 | sed 's/^/DMESG /'; echo "RC dmesg $?"`
	line := func(out, key string) string {
		m := regexp.MustCompile(`(?m)^` + key + ` (.*)$`).FindStringSubmatch(out)
		if m == nil {
			return ""
		}
		return m[1]
	}

	t.Run(policy.TierNamespace, func(t *testing.T) {
		t.Parallel()
		r := newSandbox(t, modes[0]).run(opts{}, script)
		if got := line(r.stdout, "RELEASE"); got != hostRelease {
			t.Errorf("control: uname -r under the namespace tier is %q, want the host's %q\n%s", got, hostRelease, r)
		}
		if !strings.Contains(line(r.stdout, "PROC"), hostRelease) {
			t.Errorf("control: /proc/version under the namespace tier does not name the host's release %q\n%s", hostRelease, r)
		}
	})
	t.Run(policy.TierGVisor, func(t *testing.T) {
		t.Parallel()
		m := mode{name: "root", tier: policy.TierGVisor, runsc: testutil.Runsc(t)}
		r := newSandbox(t, m).run(opts{}, script)
		if r.code != 0 {
			t.Fatalf("the script failed\n%s", r)
		}
		release, version, proc := line(r.stdout, "RELEASE"), line(r.stdout, "VERSION"), line(r.stdout, "PROC")
		if release == "" || release == hostRelease {
			t.Errorf("uname -r is %q, the host's is %q: want gVisor's own release\n%s", release, hostRelease, r)
		}
		if version == "" || version == hostVersion {
			t.Errorf("uname -v is %q, the host's is %q: want gVisor's own version\n%s", version, hostVersion, r)
		}
		if !strings.Contains(proc, release) || strings.Contains(proc, hostRelease) || strings.Contains(proc, hostVersion) {
			t.Errorf("/proc/version is %q: want gVisor's release %q and nothing of the host's %q %q\n%s", proc, release, hostRelease, hostVersion, r)
		}
		// gVisor's log starts with its own banner; the host's kernel log
		// (which names the host's release) never shows.
		if !strings.Contains(r.stdout, "RC dmesg 0") || !strings.Contains(r.stdout, "DMESG [") || !strings.Contains(r.stdout, "gVisor") {
			t.Errorf("dmesg does not show gVisor's log\n%s", r)
		}
		if strings.Contains(r.stdout, hostRelease) || strings.Contains(r.stdout, hostVersion) {
			t.Errorf("the host's kernel (%s, %s) shows inside the gVisor sandbox\n%s", hostRelease, hostVersion, r)
		}
	})
}

// TestNotUnderGVisorNamesTests: every entry of notUnderGVisor (and of
// servedNotUnderGVisor, notUnderDirectFS, underMicroVM and
// notUnderMicroVM, the last two apart) names a test
// of this package, so that a renamed test cannot leave an entry that
// skips nothing while the renamed one runs under gVisor unnoticed, or the
// reverse.
func TestNotUnderGVisorNamesTests(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("list the package's test files: %v", err)
	}
	tests := map[string]bool{}
	for _, f := range files {
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") {
				tests[fn.Name.Name] = true
			}
		}
	}
	for _, name := range underMicroVM {
		if !tests[name] {
			t.Errorf("underMicroVM names %s, which is no test of this package", name)
		}
		if why, ok := notUnderMicroVM[name]; ok {
			t.Errorf("%s is in both underMicroVM and notUnderMicroVM (%s)", name, why)
		}
	}
	for table, m := range map[string]map[string]string{"notUnderGVisor": notUnderGVisor, "servedNotUnderGVisor": servedNotUnderGVisor, "notUnderDirectFS": notUnderDirectFS, "notUnderMicroVM": notUnderMicroVM} {
		for name, why := range m {
			if !tests[name] {
				t.Errorf("%s names %s (%s), which is no test of this package", table, name, why)
			}
			if why == "" {
				t.Errorf("%s gives no reason for %s", table, name)
			}
		}
	}
}
