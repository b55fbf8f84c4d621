package main

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/e2b"
	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/image/fetch"
	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestParseTemplates: templates come from a YAML or JSON file and from
// --template flags; a name given twice, a malformed flag or a reference
// that is not an image's is refused, naming it.
func TestParseTemplates(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "templates.yaml")
	if err := os.WriteFile(file, []byte("python: python:3.12-slim\nnode: ghcr.io/o/node:22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := parseTemplates(file, []string{"base=hutch.test/base:1"})
	if err != nil || len(got) != 3 || got["python"] != "python:3.12-slim" || got["node"] != "ghcr.io/o/node:22" || got["base"] != "hutch.test/base:1" {
		t.Errorf("templates %v, %v", got, err)
	}
	jsonFile := filepath.Join(dir, "templates.json")
	if err := os.WriteFile(jsonFile, []byte(`{"go": "golang:1.26"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := parseTemplates(jsonFile, nil); err != nil || got["go"] != "golang:1.26" {
		t.Errorf("JSON: %v, %v", got, err)
	}
	for _, c := range []struct {
		file  string
		flags []string
		want  string
	}{
		{file, []string{"python=other:1"}, "python: given twice"},
		{"", []string{"nameonly"}, `"nameonly": want NAME=REF`},
		{"", []string{"a=UPPER/case"}, "--template a:"},
		{filepath.Join(dir, "missing.yaml"), nil, "missing.yaml"},
	} {
		if _, err := parseTemplates(c.file, c.flags); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseTemplates(%q, %q) = %v, want an error naming %q", c.file, c.flags, err, c.want)
		}
	}
}

// TestBuiltImages: the images scripts/base-image.sh builds are E2B's
// templates base and code-interpreter-v1 when the daemon's store holds
// them, unless --template names another for the template (or, for base,
// --no-base-image); without its image code-interpreter-v1 is no template.
func TestBuiltImages(t *testing.T) {
	state := t.TempDir()
	st, err := image.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = image.RemoveTree(state) })
	templates := func(base bool, flags ...string) map[string]string {
		t.Helper()
		got, err := parseTemplates("", flags)
		if err != nil {
			t.Fatal(err)
		}
		builtImages(state, got, base)
		return got
	}
	if got := templates(true); len(got) != 0 {
		t.Errorf("an empty store: templates %v", got)
	}
	for _, ref := range []string{e2b.CodeInterpreterImage, e2b.BaseImage} {
		img := imagetest.Image(t, "amd64", nil, imagetest.Layer(t, imagetest.Tar(t, imagetest.File("which", ref, 0o644))))
		if _, err := fetch.Import(st, imagetest.DockerSave(t, img, ref, t.TempDir()), "", fetch.Options{Root: os.Geteuid() == 0}); err != nil {
			t.Fatal(err)
		}
	}
	if got := templates(true); !maps.Equal(got, map[string]string{e2b.Template: e2b.BaseImage, e2b.CodeInterpreterTemplate: e2b.CodeInterpreterImage}) {
		t.Errorf("a store holding both images: templates %v", got)
	}
	if got := templates(false); !maps.Equal(got, map[string]string{e2b.CodeInterpreterTemplate: e2b.CodeInterpreterImage}) {
		t.Errorf("--no-base-image: templates %v", got)
	}
	if got := templates(true, e2b.CodeInterpreterTemplate+"=hutch.test/mine:1"); !maps.Equal(got, map[string]string{e2b.Template: e2b.BaseImage, e2b.CodeInterpreterTemplate: "hutch.test/mine:1"}) {
		t.Errorf("--template code-interpreter-v1=hutch.test/mine:1: templates %v", got)
	}
}

// TestParseWarm: --warm N is the default policy's pool, NAME=N a
// template's, with the policy E2B's create of the template makes; a
// malformed count, a pool given twice and an unknown template are refused.
func TestParseWarm(t *testing.T) {
	templates := map[string]string{"py": "python:3.12"}
	warm, pools, err := parseWarm([]string{"3", "py=2", "base=1"}, templates, true)
	if err != nil || warm != 3 || len(pools) != 2 {
		t.Fatalf("parseWarm: %d, %+v, %v", warm, pools, err)
	}
	py := pools[0]
	if py.Name != "py" || py.Size != 2 || py.Policy.Root != policy.ImagePrefix+"python:3.12" || py.Policy.Filesystem.Workspace != e2b.Workspace || py.Policy.Network.Mode != "proxy" {
		t.Errorf("the template's pool %+v", py)
	}
	if base := pools[1]; base.Name != "base" || base.Policy.Root != "" {
		t.Errorf("base's pool %+v", base)
	}
	if _, pools, err := parseWarm([]string{"py=1"}, templates, false); err != nil || pools[0].Policy.Network.Mode != "none" {
		t.Errorf("without the internet: %+v, %v", pools, err)
	}
	for _, c := range []struct {
		flags []string
		want  string
	}{
		{[]string{"x"}, `"x": want N or NAME=N`},
		{[]string{"-1"}, `want N or NAME=N`},
		{[]string{"py=0"}, `NAME=N: at least 1`},
		{[]string{"1", "2"}, "the default policy is given twice"},
		{[]string{"py=1", "py=2"}, "py is given twice"},
		{[]string{"node=1"}, `template "node"`},
	} {
		if _, _, err := parseWarm(c.flags, templates, true); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseWarm(%q) = %v, want an error naming %q", c.flags, err, c.want)
		}
	}
}

// TestMCPFlags: a bad --mcp-* value stops hutch serve before it listens,
// naming the flag.
func TestMCPFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--mcp-max-body", "0"}, "--mcp-max-body"},
		{[]string{"--mcp-max-body", "lots"}, "--mcp-max-body"},
		{[]string{"--mcp-session-timeout", "0s"}, "--mcp-session-timeout"},
		{[]string{"--mcp-max-sessions", "-1"}, "--mcp-max-sessions"},
		{[]string{"--mcp-allowed-host", "http://example.org"}, `--mcp-allowed-host "http://example.org"`},
		{[]string{"--mcp-allowed-host", "example.org:80"}, "--mcp-allowed-host"},
		{[]string{"--mcp-public-url", "example.org"}, "--mcp-public-url"},
	} {
		var stderr strings.Builder
		args := append([]string{"--socket", filepath.Join(t.TempDir(), "s.sock"), "--state-dir", t.TempDir()}, c.args...)
		if code := cmdServe(args, &stderr); code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("hutch serve %q: exit %d, %q; want 2 naming %s", c.args, code, stderr.String(), c.want)
		}
	}
}

// TestServeTLS: --domain needs --listen and a DNS name; --tls-cert and
// --tls-key go together; with a domain the certificate must cover api.D
// and *.D. A good pair gives a TLS configuration of HTTP/1.1.
func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	wild := testutil.NewServerTLS(t, "*.e2b.hutch.test")
	cert, key := write("cert.pem", wild.CertPEM), write("key.pem", wild.KeyPEM)
	other := testutil.NewServerTLS(t, "api.e2b.hutch.test")
	otherCert, otherKey := write("other.pem", other.CertPEM), write("other.key", other.KeyPEM)
	for _, c := range []struct {
		domain, listen, cert, key, want string
	}{
		{"e2b.hutch.test", "", "", "", "--domain needs --listen"},
		{"localhost", "127.0.0.1:0", "", "", "--domain: domain \"localhost\""},
		{"", "127.0.0.1:0", cert, "", "go together"},
		{"", "", cert, key, "--tls-cert needs --listen"},
		{"", "127.0.0.1:0", key, cert, "--tls-cert, --tls-key"},
		{"e2b.hutch.test", "127.0.0.1:0", otherCert, otherKey, "does not cover 49983-sb-aaaaaaaaaaaa.e2b.hutch.test"},
		{"other.test", "127.0.0.1:0", cert, key, "does not cover api.other.test"},
	} {
		if _, err := serveTLS(c.domain, c.listen, c.cert, c.key); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("serveTLS(%q, %q, %q, %q) = %v; want an error with %q", c.domain, c.listen, c.cert, c.key, err, c.want)
		}
	}
	cfg, err := serveTLS("E2B.hutch.test.", "127.0.0.1:0", cert, key)
	if err != nil || cfg == nil || len(cfg.Certificates) != 1 || !slices.Equal(cfg.NextProtos, []string{"http/1.1"}) {
		t.Errorf("serveTLS with a wildcard certificate: %+v, %v", cfg, err)
	}
	if cfg, err := serveTLS("e2b.hutch.test", "127.0.0.1:0", "", ""); cfg != nil || err != nil {
		t.Errorf("serveTLS without a certificate: %+v, %v; want plain HTTP", cfg, err)
	}
}
