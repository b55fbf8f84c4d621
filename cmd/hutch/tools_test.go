package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// The tests in this file run real package managers and version control in
// a sandbox with --net proxy, against loopback upstreams the test serves
// under made-up names pinned with --add-host: the tools must work through
// hutch's proxy as they are, with nothing but their usual proxy variables
// and offline settings. No request leaves this machine.

// toolServer is a loopback upstream for one tool, reached from the sandbox
// as name:port. It logs every request for the failure messages.
type toolServer struct {
	name, port string
	mu         sync.Mutex
	log        []string
}

// serveTool serves h on 127.0.0.1 under name until the test ends.
func serveTool(t *testing.T, name string, h http.Handler) *toolServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	s := &toolServer{name: name, port: port}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(sw, r)
		s.mu.Lock()
		s.log = append(s.log, fmt.Sprintf("%s %s%s -> %d", r.Method, r.Host, r.URL.RequestURI(), sw.code))
		s.mu.Unlock()
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return s
}

// url is the upstream's base URL as the sandbox names it.
func (s *toolServer) url() string { return "http://" + s.name + ":" + s.port }

// requests lists what the upstream was asked, one request a line.
func (s *toolServer) requests() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.log) == 0 {
		return "(none)"
	}
	return strings.Join(s.log, "\n")
}

// statusWriter remembers the status code a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// run runs script with sh -c in the workspace ws, under --net proxy with
// only s's name:port allowed and that name pinned to loopback; every env
// entry becomes an --env flag. It fails the test unless the command
// succeeded and the report shows the proxy let traffic through to s.
func (s *toolServer) run(t *testing.T, ws, script string, env ...string) result {
	t.Helper()
	report := filepath.Join(t.TempDir(), "report.jsonl")
	args := []string{"--net", "proxy", "--allow-domain", s.name + ":" + s.port,
		"--add-host", s.name + ":127.0.0.1", "--allow-private", "127.0.0.1/32", "--report", report}
	for _, e := range env {
		args = append(args, "--env", e)
	}
	r := sandboxed(t, invocation{dir: ws, args: sh(script, args...)})
	if r.code != 0 {
		t.Fatalf("the tool failed in the sandbox: %s\nthe upstream %s got:\n%s", r, s.url(), s.requests())
	}
	var allowed []reportLine
	for _, l := range readReport(t, report) {
		if l.Action == "allowed" {
			if l.Host == s.name && strconv.Itoa(l.Port) == s.port {
				return r
			}
			allowed = append(allowed, l)
		}
	}
	t.Fatalf("the report has no allowed line for %s:%s (the tool did not go through the proxy?); allowed lines: %+v\n%s\nthe upstream got:\n%s",
		s.name, s.port, allowed, r, s.requests())
	return r
}

// hostCmd runs a command on the host for a test's setup.
func hostCmd(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// needTool skips the test when name is not installed on this machine.
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	testutil.Need(t, err == nil, fmt.Sprintf("%s is not installed (scripts/test.sh installs it)", name))
	return p
}

// zipFiles builds a zip archive of files (name to content), in the order
// names gives.
func zipFiles(t *testing.T, names []string, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, name := range names {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(files[name])); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestToolGitClone: git clones a repository served with git's "dumb" HTTP
// protocol (plain files) through the proxy.
func TestToolGitClone(t *testing.T) {
	t.Parallel()
	needTool(t, "git")
	const content = "cloned through hutch's proxy\n"
	tmp := t.TempDir()
	gitEnv := []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME=" + tmp,
		"GIT_AUTHOR_NAME=hutch test", "GIT_AUTHOR_EMAIL=test@hutch.test",
		"GIT_COMMITTER_NAME=hutch test", "GIT_COMMITTER_EMAIL=test@hutch.test"}
	bare := filepath.Join(tmp, "srv", "repo.git")
	hostCmd(t, tmp, gitEnv, "git", "init", "-q", "--bare", bare)
	hostCmd(t, bare, gitEnv, "git", "symbolic-ref", "HEAD", "refs/heads/main")
	work := filepath.Join(tmp, "work")
	hostCmd(t, tmp, gitEnv, "git", "init", "-q", work)
	writeFile(t, filepath.Join(work, "README"), content, 0o644)
	hostCmd(t, work, gitEnv, "git", "add", "README")
	hostCmd(t, work, gitEnv, "git", "commit", "-q", "-m", "first")
	hostCmd(t, work, gitEnv, "git", "push", "-q", bare, "HEAD:refs/heads/main")
	hostCmd(t, bare, gitEnv, "git", "update-server-info")

	s := serveTool(t, "repo.test", http.FileServer(http.Dir(filepath.Join(tmp, "srv"))))
	ws := t.TempDir()
	r := s.run(t, ws, "git clone -q "+s.url()+"/repo.git clone && git -C clone log --format=%s",
		"HOME=/tmp", "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0")
	if r.stdout != "first\n" {
		t.Errorf("git log in the clone: got %q, want %q\n%s", r.stdout, "first\n", r)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "clone", "README")); err != nil || string(b) != content {
		t.Errorf("the cloned README: got %q, %v; want %q\nthe upstream got:\n%s", b, err, content, s.requests())
	}
}

// TestToolGoModules: the go command fetches a module from a GOPROXY
// protocol server through the proxy, and the module's package resolves.
func TestToolGoModules(t *testing.T) {
	t.Parallel()
	gobin := needTool(t, "go")
	const (
		mod  = "example.test/m"
		ver  = "v1.0.0"
		code = "package m\n\n// Greeting is what the module says.\nfunc Greeting() string { return \"hello from example.test/m\" }\n"
	)
	gomod := "module " + mod + "\n\ngo 1.21\n"
	prefix := mod + "@" + ver + "/"
	zipped := zipFiles(t, []string{prefix + "go.mod", prefix + "m.go"},
		map[string]string{prefix + "go.mod": gomod, prefix + "m.go": code})
	files := map[string]string{
		"/" + mod + "/@v/list":             ver + "\n",
		"/" + mod + "/@v/" + ver + ".info": `{"Version":"` + ver + `","Time":"2024-01-02T03:04:05Z"}`,
		"/" + mod + "/@v/" + ver + ".mod":  gomod,
		"/" + mod + "/@v/" + ver + ".zip":  string(zipped),
	}
	s := serveTool(t, "goproxy.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(body))
	}))

	ws := t.TempDir()
	writeFile(t, filepath.Join(ws, "go.mod"), "module example.test/app\n\ngo 1.21\n\nrequire "+mod+" "+ver+"\n", 0o644)
	writeFile(t, filepath.Join(ws, "main.go"),
		"package main\n\nimport \"example.test/m\"\n\nfunc main() { println(m.Greeting()) }\n", 0o644)
	script := `go mod download && dir=$(go list -f '{{.Dir}}' ` + mod + `) && cat "$dir/m.go"`
	r := s.run(t, ws, script,
		"PATH="+filepath.Dir(gobin)+":"+stdPath, "HOME=/tmp", "GOENV=off", "GOTOOLCHAIN=local",
		"GOPROXY="+s.url(), "GOSUMDB=off", "GONOSUMDB=", "GOPRIVATE=", "GONOPROXY=", "GOFLAGS=-mod=mod",
		"GOCACHE=/tmp/go-cache", "GOMODCACHE=/tmp/go-mod")
	if r.stdout != code {
		t.Errorf("the module's source in the sandbox: got %q, want %q\n%s", r.stdout, code, r)
	}
	sum, err := os.ReadFile(filepath.Join(ws, "go.sum"))
	if err != nil || !strings.Contains(string(sum), mod+" "+ver+" h1:") {
		t.Errorf("go.sum does not record %s %s: %q, %v\n%s", mod, ver, sum, err, r)
	}
}

// TestToolNpmInstall: npm installs a package from a registry (packument
// and tarball) through the proxy.
func TestToolNpmInstall(t *testing.T) {
	t.Parallel()
	needTool(t, "npm")
	const (
		pkg   = "hutch-tiny"
		ver   = "1.0.0"
		index = "module.exports = { hello: \"hello from hutch-tiny\" };\n"
	)
	manifest := `{"name":"` + pkg + `","version":"` + ver + `","main":"index.js","license":"MIT"}`
	var tgz bytes.Buffer
	gz := gzip.NewWriter(&tgz)
	tw := tar.NewWriter(gz)
	for _, f := range []struct{ name, body string }{
		{"package/package.json", manifest},
		{"package/index.js", index},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	sha1sum := sha1.Sum(tgz.Bytes())
	sha512sum := sha512.Sum512(tgz.Bytes())
	tarPath := "/" + pkg + "/-/" + pkg + "-" + ver + ".tgz"

	var s *toolServer
	s = serveTool(t, "npm.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/" + pkg:
			doc := map[string]any{
				"name":      pkg,
				"dist-tags": map[string]string{"latest": ver},
				"versions": map[string]any{ver: map[string]any{
					"name": pkg, "version": ver, "main": "index.js", "license": "MIT",
					"dist": map[string]string{
						"tarball":   s.url() + tarPath,
						"shasum":    hex.EncodeToString(sha1sum[:]),
						"integrity": "sha512-" + base64.StdEncoding.EncodeToString(sha512sum[:]),
					},
				}},
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(doc)
		case tarPath:
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = w.Write(tgz.Bytes())
		default:
			http.NotFound(w, r)
		}
	}))

	ws := t.TempDir()
	script := "npm install --registry " + s.url() + "/ --no-audit --no-fund --no-update-notifier " + pkg +
		` >npm.log 2>&1 || { cat npm.log; exit 1; }; node -e 'console.log(require("` + pkg + `").hello)'`
	r := s.run(t, ws, script, "HOME=/tmp", "npm_config_cache=/tmp/npm-cache", "npm_config_update_notifier=false")
	if want := "hello from hutch-tiny\n"; r.stdout != want {
		t.Errorf("node requiring the installed package: got %q, want %q\n%s", r.stdout, want, r)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "node_modules", pkg, "index.js")); err != nil || string(b) != index {
		t.Errorf("node_modules/%s/index.js: got %q, %v; want %q\nthe upstream got:\n%s", pkg, b, err, index, s.requests())
	}
}

// pythonsWithPip lists interpreters that can run pip on the host: the
// real interpreter behind python3 (which may be a version manager's shim),
// and the system's.
func pythonsWithPip(t *testing.T) []string {
	t.Helper()
	var cands []string
	if _, err := exec.LookPath("python3"); err == nil {
		if out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output(); err == nil {
			cands = append(cands, strings.TrimSpace(string(out)))
		}
	}
	cands = append(cands, "/usr/bin/python3", "/usr/local/bin/python3")
	var out []string
	for _, c := range cands {
		if c == "" || slices.Contains(out, c) {
			continue
		}
		if exec.Command(c, "-m", "pip", "--version").Run() == nil {
			out = append(out, c)
		}
	}
	return out
}

// TestToolPipDownload: pip downloads a wheel from a PEP 503 simple index
// through the proxy.
func TestToolPipDownload(t *testing.T) {
	t.Parallel()
	pythons := pythonsWithPip(t)
	testutil.Need(t, len(pythons) > 0, "no python3 on this machine can run pip (scripts/test.sh installs python3-pip)")
	const (
		project = "hutch-tiny"
		wheel   = "hutch_tiny-1.0-py3-none-any.whl"
		dist    = "hutch_tiny-1.0.dist-info/"
	)
	files := map[string]string{
		"hutch_tiny/__init__.py": "GREETING = \"hello from hutch-tiny\"\n",
		dist + "METADATA":        "Metadata-Version: 2.1\nName: hutch-tiny\nVersion: 1.0\nSummary: a test package\n",
		dist + "WHEEL":           "Wheel-Version: 1.0\nGenerator: hutch-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
	}
	names := []string{"hutch_tiny/__init__.py", dist + "METADATA", dist + "WHEEL"}
	var record strings.Builder
	for _, n := range names {
		h := sha256.Sum256([]byte(files[n]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", n, base64.RawURLEncoding.EncodeToString(h[:]), len(files[n]))
	}
	record.WriteString(dist + "RECORD,,\n")
	files[dist+"RECORD"] = record.String()
	names = append(names, dist+"RECORD")
	whl := zipFiles(t, names, files)
	whlSum := sha256.Sum256(whl)

	s := serveTool(t, "pypi.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/simple/":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, "<!DOCTYPE html>\n<html><body><a href=\"%s/\">%s</a></body></html>\n", project, project)
		case "/simple/" + project + "/":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, "<!DOCTYPE html>\n<html><body><a href=\"../../files/%s#sha256=%x\">%s</a></body></html>\n",
				wheel, whlSum, wheel)
		case "/files/" + wheel:
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = w.Write(whl)
		default:
			http.NotFound(w, r)
		}
	}))

	// The first of them that can run pip in the sandbox too (a version
	// manager's shim or install may lie in what the sandbox hides) does
	// the download.
	probe := sandboxed(t, invocation{args: append([]string{"--", "sh", "-c",
		`for py; do "$py" -m pip --version >/dev/null 2>&1 && { echo "$py"; exit 0; }; done; exit 1`, "sh"}, pythons...)})
	testutil.Need(t, probe.code == 0, fmt.Sprintf("none of %q can run pip inside the sandbox\n%s", pythons, probe))
	python := strings.TrimSpace(probe.stdout)
	t.Logf("pip runs as %s -m pip", python)
	ws := t.TempDir()
	script := "'" + python + "' -m pip download --no-deps --index-url " + s.url() + "/simple/ --trusted-host " + s.name +
		" -d dl " + project
	r := s.run(t, ws, script, "HOME=/tmp", "PIP_CONFIG_FILE=/dev/null", "PIP_DISABLE_PIP_VERSION_CHECK=1",
		"PIP_NO_CACHE_DIR=1", "PIP_NO_INPUT=1", "PIP_ROOT_USER_ACTION=ignore")
	got, err := os.ReadFile(filepath.Join(ws, "dl", wheel))
	if err != nil || !bytes.Equal(got, whl) {
		t.Errorf("the downloaded wheel: %d bytes, %v; want the %d bytes served\n%s\nthe upstream got:\n%s",
			len(got), err, len(whl), r, s.requests())
	}
}
