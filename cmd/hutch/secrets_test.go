package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestPolicyShowSecrets: --secret binds hutch's variable to hosts; a
// secret's file is hidden from the sandbox; a secret makes the mode proxy.
func TestPolicyShowSecrets(t *testing.T) {
	t.Parallel()
	d := newPolicyDirs(t)
	pol := filepath.Join(d.ws, "policy.yaml")
	writeFile(t, pol, "secrets:\n  - name: API_KEY\n    hosts: [api.example.com]\n    from: file:~/keys/api\n    placeholder_prefix: sk-\n    in_body: true\n", 0o644)
	r := d.show(t, "--policy", pol, "--secret", "GH_TOKEN@github.com,api.github.com")
	wantOK(t, r)
	p := parsePolicy(t, r.stdout)
	eq(t, "mode", p.Network.Mode, "proxy")
	if len(p.Secrets) != 2 {
		t.Fatalf("want 2 secrets, got %+v", p.Secrets)
	}
	eq(t, "file secret", p.Secrets[0].From, "file:"+filepath.Join(d.home, "keys/api"))
	eq(t, "prefix", p.Secrets[0].PlaceholderPrefix, "sk-")
	eq(t, "in_body", p.Secrets[0].InBody, true)
	eq(t, "flag secret", p.Secrets[1].Name, "GH_TOKEN")
	eq(t, "flag hosts", p.Secrets[1].Hosts, []string{"github.com", "api.github.com"})
	eq(t, "flag source", p.Secrets[1].From, "env:GH_TOKEN")
	if !strings.Contains(strings.Join(p.Filesystem.DenyRead, "\n"), filepath.Join(d.home, "keys/api")) {
		t.Errorf("the secret's file is not denied to the sandbox: %q", p.Filesystem.DenyRead)
	}
}

// TestSecretErrors: bad secrets are refused before anything runs, and a
// real value is never passed into the sandbox another way.
func TestSecretErrors(t *testing.T) {
	t.Parallel()
	d := newPolicyDirs(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--secret", "GH_TOKEN"}, `--secret "GH_TOKEN": want NAME@host1,host2`},
		{[]string{"--secret", "GH_TOKEN@https://github.com"}, `secrets[0].hosts[0]: invalid domain "https://github.com": give a host name, not a URL`},
		{[]string{"--secret", "GH_TOKEN@github.com", "--net", "none"}, `secrets: need network mode "proxy"`},
	} {
		r := d.show(t, tt.args...)
		if r.code != 125 || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("policy show %q: want exit 125 and %q, got %s", tt.args, tt.want, r)
		}
	}
}

// TestSecretNeverPassed: hutch refuses to start a sandbox whose other
// variables or arguments hold a secret's real value, and refuses a secret
// whose variable is unset; the sandbox sees only the placeholder.
func TestSecretNeverPassed(t *testing.T) {
	const real = "real-value-0123456789abcdefghijklmnop"
	env := append(baseEnv(t.TempDir()), "GH_TOKEN="+real, "COPY="+real)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{sh("echo hi", "--secret", "GH_TOKEN@github.com", "--pass-env", "COPY"), "secret GH_TOKEN: the sandbox's variable COPY holds its real value"},
		{sh("echo "+real, "--secret", "GH_TOKEN@github.com"), "secret GH_TOKEN: argument 2 of the command holds its real value"},
		{sh("echo hi", "--secret", "MISSING@github.com"), "secret MISSING: hutch's environment has no MISSING"},
	} {
		r := sandboxed(t, invocation{args: tt.args, env: env})
		if r.code != 125 || !strings.Contains(r.stderr, tt.want) || strings.Contains(r.stdout, real) {
			t.Errorf("run %q: want exit 125 and %q, got %s", tt.args, tt.want, r)
		}
	}
	r := sandboxed(t, invocation{args: sh(`echo "token=$GH_TOKEN"; cat /proc/1/environ /proc/1/cmdline 2>&1; env`, "--secret", "GH_TOKEN@github.com", "--pass-env", "GH_TOKEN"), env: env})
	wantOK(t, r)
	if strings.Contains(r.stdout+r.stderr, real) {
		t.Fatalf("S3 violated: the real value reached the sandbox\n%s", r)
	}
	if !strings.Contains(r.stdout, "token=") || strings.Contains(r.stdout, "token=\n") {
		t.Errorf("the sandbox got no placeholder in $GH_TOKEN\n%s", r)
	}
}
