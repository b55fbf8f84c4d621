//go:build linux

package escape

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// homeSecrets are credential, key and history files of ESCAPES item 1,
// relative to $HOME.
var homeSecrets = []string{
	".ssh/id_rsa", ".ssh/id_ed25519", ".aws/credentials", ".config/gh/hosts.yml", ".netrc",
	".docker/config.json", ".kube/config", ".npmrc", ".pypirc", ".git-credentials",
	".gnupg/private-keys-v1.d/key.key", ".bash_history", ".zsh_history", ".env",
}

// plantSecrets writes a fake secret into every homeSecrets file and an
// ordinary notes.txt, all world-readable (files 0644, directories 0755) so
// that only hutch's masking, not file permissions, protects them. It returns
// the path → content of every secret, and notes.txt's content.
func plantSecrets(t *testing.T, home string, uid int) (map[string]string, string) {
	t.Helper()
	secrets := map[string]string{}
	for _, rel := range homeSecrets {
		if dir := filepath.Dir(rel); dir != "." {
			mkdirs(t, home, uid, dir)
		}
		content := randomName("hutch-fake-secret-") + "\n"
		writeFile(t, filepath.Join(home, rel), content, 0o644, uid)
		secrets[rel] = strings.TrimSpace(content)
	}
	notes := randomName("hutch-notes-")
	writeFile(t, filepath.Join(home, "notes.txt"), notes+"\n", 0o644, uid)
	return secrets, notes
}

// noSecret fails the test if any secret value appears in the run's output.
func noSecret(t *testing.T, r result, secrets map[string]string) {
	t.Helper()
	for rel, s := range secrets {
		if strings.Contains(r.stdout, s) || strings.Contains(r.stderr, s) {
			t.Errorf("S3 violated: the content of ~/%s was read inside the sandbox", rel)
		}
	}
}

// TestItem01_CredentialFiles: the credential, key and history files of the
// invoking user's home are unreadable inside the sandbox, even though their
// permissions would allow it, while an ordinary file beside them is
// readable (S3). Reading them by other names (/proc/self/root, "..",
// grep -r) fails too, and the home is unchanged afterwards.
func TestItem01_CredentialFiles(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		secrets, notes := plantSecrets(t, sb.home, sb.mode.uid)
		before := snapshot(t, sb.home)
		var script strings.Builder
		fmt.Fprintf(&script, "cat \"$HOME/notes.txt\"\n")
		for _, rel := range homeSecrets {
			fmt.Fprintf(&script, "cat \"$HOME/%s\" 2>&1; echo \"RC %s $?\"\n", rel, rel)
		}
		script.WriteString(`
cat "/proc/self/root$HOME/.ssh/id_rsa" 2>&1; echo "RC procroot $?"
cat "$PWD/../../..$HOME/.aws/credentials" 2>&1; echo "RC dotdot $?"
grep -r hutch-fake-secret "$HOME" 2>&1; echo "RC grep $?"
ls -la "$HOME/.ssh" 2>&1; echo "RC ls $?"
`)
		r := sb.run(opts{}, script.String())
		noSecret(t, r, secrets)
		if !strings.Contains(r.stdout, notes) {
			t.Errorf("control failed: ~/notes.txt was not readable inside the sandbox\n%s", r)
		}
		for _, rel := range homeSecrets {
			if !strings.Contains(r.stdout, fmt.Sprintf("RC %s 1", rel)) || !strings.Contains(r.stdout, rel+": Permission denied") {
				t.Errorf("reading ~/%s: want cat to fail with Permission denied\n%s", rel, r)
			}
		}
		for _, what := range []string{"procroot", "dotdot", "ls"} {
			if strings.Contains(r.stdout, "RC "+what+" 0") {
				t.Errorf("%s: reading a masked path succeeded\n%s", what, r)
			}
		}
		sameTree(t, sb.home, before)
	})
}

// TestItem02_Environment: secrets in the caller's environment do not enter
// the sandbox (S3): not the command's environment, not /proc/*/environ or
// /proc/*/cmdline of any process it can see (init included), and
// SSH_AUTH_SOCK is not passed. A variable set with --env and the safe
// variables (HOME, LANG) arrive, so the check can fail.
func TestItem02_Environment(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		token := randomName("hutch-env-secret-")
		env := []string{
			"GITHUB_TOKEN=" + token, "AWS_SECRET_ACCESS_KEY=" + token, "ANTHROPIC_API_KEY=" + token,
			"OPENAI_API_KEY=" + token, "NPM_TOKEN=" + token, "SSH_AUTH_SOCK=/run/user/1/" + token,
			"HTTPS_PROXY=http://user:" + token + "@proxy.invalid:3128", "DATABASE_URL=postgres://u:" + token + "@db",
		}
		script := `
echo "VISIBLE=$VISIBLE LANG=$LANG"
echo "SSH_AUTH_SOCK=${SSH_AUTH_SOCK:-unset}"
env
cat /proc/self/environ | tr '\0' '\n'
for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do echo "== $f"; cat "$f" 2>&1 | tr '\0' ' '; echo; done
cat /proc/1/environ 2>&1; echo "RC init-environ $?"
echo "INIT-CMDLINE $(tr '\0' ' ' </proc/1/cmdline)"
`
		r := sb.run(opts{env: env, flags: []string{"--env", "VISIBLE=yes"}}, script)
		if strings.Contains(r.stdout, token) || strings.Contains(r.stderr, token) {
			t.Errorf("S3 violated: a secret from the caller's environment is visible inside the sandbox\n%s", r)
		}
		if !strings.Contains(r.stdout, "VISIBLE=yes LANG=C") {
			t.Errorf("control failed: --env VISIBLE=yes or LANG did not reach the sandbox\n%s", r)
		}
		if !strings.Contains(r.stdout, "SSH_AUTH_SOCK=unset") {
			t.Errorf("SSH_AUTH_SOCK was passed into the sandbox\n%s", r)
		}
		if !strings.Contains(r.stdout, "RC init-environ 1") || !strings.Contains(r.stdout, "Permission denied") {
			t.Errorf("reading init's /proc/1/environ: want Permission denied\n%s", r)
		}
		if !strings.Contains(r.stdout, "INIT-CMDLINE hutch:init") {
			t.Errorf("init's command line is not the bare marker\n%s", r)
		}
	})
}

// TestItem03_HostRootOnlyFiles: files only host root may read stay
// unreadable even when root starts the sandbox (S1): /etc/shadow (also on
// the default deny list) and a root-owned 0600 file that no deny rule
// covers (--no-default-denies), while a root-owned 0644 file beside it is
// readable. Changing the file's mode or owner fails too.
func TestItem03_HostRootOnlyFiles(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		dir := hostDir(t, 0, "rootonly")
		secret := randomName("hutch-root-secret-")
		public := randomName("hutch-public-")
		writeFile(t, filepath.Join(dir, "secret"), secret+"\n", 0o600, 0)
		writeFile(t, filepath.Join(dir, "public"), public+"\n", 0o644, 0)
		before := snapshot(t, dir)
		script := fmt.Sprintf(`
cat %[1]s/public
cat %[1]s/secret 2>&1; echo "RC secret $?"
chmod 0644 %[1]s/secret 2>&1; echo "RC chmod $?"
chown 0:0 %[1]s/secret 2>&1; echo "RC chown $?"
cat /etc/shadow 2>&1; echo "RC shadow $?"
`, dir)
		for _, flags := range [][]string{nil, {"--no-default-denies"}} {
			r := sb.run(opts{flags: flags}, script)
			if strings.Contains(r.stdout, secret) {
				t.Errorf("S1 violated (flags %q): a root-only 0600 file was read\n%s", flags, r)
			}
			if !strings.Contains(r.stdout, public) {
				t.Errorf("control failed (flags %q): the root-owned 0644 file was not readable\n%s", flags, r)
			}
			for _, want := range []string{"RC secret 1", "secret: Permission denied", "RC shadow 1", "/etc/shadow: Permission denied"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("flags %q: want %q in the output\n%s", flags, want, r)
				}
			}
			for _, bad := range []string{"RC chmod 0", "RC chown 0"} {
				if strings.Contains(r.stdout, bad) {
					t.Errorf("flags %q: %s: changing a host root file succeeded\n%s", flags, bad, r)
				}
			}
			if strings.Contains(r.stdout, "root:") && strings.Contains(r.stdout, "RC shadow 0") {
				t.Errorf("flags %q: /etc/shadow was read\n%s", flags, r)
			}
		}
		sameTree(t, dir, before)
	})
}
