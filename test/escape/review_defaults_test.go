//go:build linux

package escape

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// makeScript returns shell lines that create each name below the working
// directory — a file when the name has an extension, else a directory with
// a file in it — printing "MADE name" for each that worked.
func makeScript(names []string) string {
	var b strings.Builder
	for _, n := range names {
		if dir := filepath.Dir(n); dir != "." {
			fmt.Fprintf(&b, "mkdir -p '%s' 2>/dev/null\n", dir)
		}
		if strings.Contains(strings.TrimPrefix(filepath.Base(n), "."), ".") {
			fmt.Fprintf(&b, "echo 'run: touch /tmp/pwned' > '%s' 2>/dev/null && echo 'MADE %s'\n", n, n)
		} else {
			fmt.Fprintf(&b, "mkdir -p '%s' 2>/dev/null && echo 'run: touch /tmp/pwned' > '%s/settings.json' && echo 'MADE %s'\n", n, n, n)
		}
	}
	return b.String()
}

// setAsideNames lists the default deny-write names of the SetAside kind,
// home-only or not.
func setAsideNames(homeOnly bool) []string {
	var out []string
	for _, n := range policy.DefaultDenyWrite() {
		if n.How == policy.SetAside && n.HomeOnly == homeOnly {
			out = append(out, n.Name)
		}
	}
	return out
}

// TestItem23_ToolConfig: configuration that other tools run commands from
// — coding agents' MCP and settings files, editors' task files, pre-commit,
// husky and lefthook, dev containers, aider and opencode, environment
// managers, debugger start-up files — cannot be changed where it exists
// (the examples among them), and whatever of it the sandbox
// creates is set aside when the sandbox ends: none of it is left where the
// tool would read it, each is reported, and the rest of what the sandbox
// wrote stays (the control). With the home directory writable, the same
// holds for the home-only names (ssh's config, git's and the editors'
// configuration, programs on the user's PATH).
func TestItem23_ToolConfig(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		existing := map[string]string{
			".gemini/settings.json": "{}\n", ".amazonq/mcp.json": "{}\n", ".roo/mcp.json": "{}\n",
			".kiro/settings/mcp.json": "{}\n", ".continue/config.yaml": "x: 1\n", "opencode.json": "{}\n",
			".aider.conf.yml": "lint-cmd: true\n", ".pre-commit-config.yaml": "repos: []\n", ".husky/pre-commit": "true\n",
			".devcontainer/devcontainer.json": "{}\n", ".zed/tasks.json": "[]\n",
		}
		for p, c := range existing {
			mkdirs(t, sb.ws, sb.mode.uid, filepath.Dir(p))
			writeFile(t, filepath.Join(sb.ws, p), c, 0o644, sb.mode.uid)
		}
		before := snapshot(t, sb.ws)
		var edits strings.Builder
		for p := range existing {
			fmt.Fprintf(&edits, "echo 'mcpServers: evil' >> '%s' 2>/dev/null && echo 'WROTE %s'\n", p, p)
			fmt.Fprintf(&edits, "rm -rf '%s' 2>/dev/null; [ -e '%s' ] || echo 'WROTE rm %s'\n", p, p, p)
		}
		var missing []string
		for _, n := range setAsideNames(false) {
			if _, ok := before[n]; !ok {
				missing = append(missing, n)
			}
		}
		r := sb.run(opts{}, edits.String()+makeScript(missing)+"echo ok > notes.txt\n")
		for p := range existing {
			if strings.Contains(r.stdout, "WROTE "+p+"\n") || strings.Contains(r.stdout, "WROTE rm "+p+"\n") {
				t.Errorf("the sandbox changed existing %s\n%s", p, r)
			}
		}
		var ignore []string
		for _, n := range missing {
			if !strings.Contains(r.stdout, "MADE "+n+"\n") {
				t.Errorf("control: the sandbox could not make %s\n%s", n, r)
				continue
			}
			if exists(filepath.Join(sb.ws, n)) {
				t.Errorf("%s, which the sandbox made, is still where its tool reads it\n%s", n, r)
			}
			aside := filepath.Join(sb.ws, n+policy.SetAsideSuffix)
			if !exists(aside) {
				t.Errorf("%s was not set aside as %s\n%s", n, aside, r)
			}
			if !strings.Contains(r.stderr, "set aside "+filepath.Join(sb.ws, n)+" ") {
				t.Errorf("setting %s aside was not reported\n%s", n, r)
			}
			top := strings.Split(n, "/")[0]
			if top != n {
				ignore = append(ignore, top) // a parent the sandbox made
			}
			ignore = append(ignore, filepath.Join(filepath.Dir(n), filepath.Base(n)+policy.SetAsideSuffix))
		}
		for p := range snapshot(t, sb.ws) {
			for _, i := range ignore {
				if p == i || strings.HasPrefix(p, i+"/") {
					ignore = append(ignore, p)
				}
			}
		}
		sameTree(t, sb.ws, before, append(ignore, "notes.txt")...)
		if b, err := os.ReadFile(filepath.Join(sb.ws, "notes.txt")); err != nil || string(b) != "ok\n" {
			t.Errorf("control: the workspace file the sandbox wrote is gone: %q %v", b, err)
		}

		if sb.microvm() {
			return // a writable home (--allow-write) is refused under microvm
		}
		// The home directory, writable.
		homeNames := setAsideNames(true)
		r = sb.run(opts{flags: []string{"--workspace", sb.ws, "--allow-write", sb.home}}, "cd \"$HOME\" || exit 99\n"+makeScript(homeNames)+"echo ok > notes.txt\n")
		for _, n := range homeNames {
			if !strings.Contains(r.stdout, "MADE "+n+"\n") {
				continue // a parent that is itself protected (.ssh is unreadable): nothing made
			}
			if exists(filepath.Join(sb.home, n)) || !exists(filepath.Join(sb.home, n+policy.SetAsideSuffix)) {
				t.Errorf("home %s, which the sandbox made, was not set aside\n%s", n, r)
			}
		}
		if !exists(filepath.Join(sb.home, "notes.txt")) {
			t.Errorf("control: could not write the writable home\n%s", r)
		}
	})
}

// TestItem24_CredentialStores: every credential store of the default list
// — AI tools' tokens (Claude Code, Codex, Copilot, Gemini, Hugging Face),
// git's XDG credentials, database clients' files, cloud CLIs, package
// registries, password managers, browser profiles, histories — is
// unreadable in the sandbox, by name and by listing its directory, while
// an ordinary file next to them reads (the control). The examples
// are named here, so that dropping one from the list fails the test.
func TestItem24_CredentialStores(t *testing.T) {
	named := []string{
		".claude/.credentials.json", ".codex/auth.json", ".config/git/credentials", ".pgpass", ".my.cnf",
		".cache/huggingface/token", ".config/github-copilot/hosts.json", ".aws/credentials", ".ssh/id_ed25519",
		".docker/config.json", ".kube/config", ".npmrc", ".netrc", ".git-credentials", ".gemini/oauth_creds.json",
		".config/gcloud/credentials.db", ".azure/msal_token_cache.json", ".password-store/x.gpg",
		".mozilla/firefox/p/logins.json", ".config/google-chrome/Default/Cookies", ".local/share/keyrings/login.keyring",
		".config/pypoetry/auth.toml", ".m2/settings.xml", ".gradle/gradle.properties", ".bash_history",
	}
	forEachMode(t, func(t *testing.T, sb *harness) {
		var files []string
		for _, p := range policy.DefaultDenyRead(sb.home) {
			rel, err := filepath.Rel(sb.home, p)
			if err != nil || strings.HasPrefix(rel, "..") {
				continue
			}
			files = append(files, rel)
		}
		for _, n := range named {
			covered := false
			for _, f := range files {
				if n == f || strings.HasPrefix(n, f+"/") {
					covered = true
				}
			}
			if !covered {
				t.Errorf("%s is not in the default deny-read list", n)
			}
		}
		// Make every entry: a file with a secret, or (for a directory
		// entry) a directory holding one.
		var probe []string
		for _, f := range append(files, named...) {
			path := filepath.Join(sb.home, f)
			if exists(path) {
				continue
			}
			base := filepath.Base(f)
			if isFileName(f) || strings.Contains(strings.TrimPrefix(base, "."), ".") || strings.HasSuffix(base, "history") || base == "token" {
				mkdirs(t, sb.home, sb.mode.uid, filepath.Dir(f))
				writeFile(t, path, "SECRET-"+f+"\n", 0o600, sb.mode.uid)
				probe = append(probe, f)
			} else {
				mkdirs(t, sb.home, sb.mode.uid, f)
				writeFile(t, filepath.Join(path, "secret"), "SECRET-"+f+"\n", 0o600, sb.mode.uid)
				probe = append(probe, filepath.Join(f, "secret"))
			}
		}
		writeFile(t, filepath.Join(sb.home, "notes.txt"), "readable\n", 0o644, sb.mode.uid)
		// One attacker process reads every file and lists its directory
		// (hundreds of cat and ls processes took minutes under gVisor on a
		// busy machine).
		sb.attacker()
		var args []string
		for _, p := range probe {
			args = append(args, "open:"+p, "list:"+filepath.Dir(p))
		}
		args = append(args, "open:notes.txt")
		o := opts{}
		if sb.microvm() {
			// The microvm guest sees no home of the host's at all; with
			// the home as its workspace (shared with the guest,
			// read-write) the stores must be hidden there.
			copyFile(t, filepath.Join(sb.ws, "attacker"), filepath.Join(sb.home, "attacker"), 0o755, sb.mode.uid)
			o.dir = sb.home
		}
		r := sb.run(o, "a=\"$PWD/attacker\"; cd \"$HOME\" || exit 99; exec \"$a\" "+shellWords(args...))
		if n := strings.Count(r.stdout, "\nopen:") + strings.Count(r.stdout, "\nlist:") + 1; n < len(args) || r.code != 0 {
			t.Errorf("the probe ended early: %d results of %d\n%s", n, len(args), r)
		}
		var leaked, listed []string
		for _, line := range strings.Split(r.stdout, "\n") {
			if strings.HasPrefix(line, "open:") && strings.Contains(line, "SECRET-") {
				leaked = append(leaked, line)
			}
			if strings.HasPrefix(line, "list:") && strings.Contains(line, ` "secret"`) {
				listed = append(listed, line)
			}
		}
		if len(leaked) > 0 {
			t.Errorf("the sandbox read credential stores: %v", leaked)
		}
		if len(listed) > 0 {
			t.Errorf("the sandbox listed a credential store's contents: %v", listed)
		}
		if !strings.Contains(r.stdout, "readable") {
			t.Errorf("control: an ordinary file in the home is unreadable\n%s", r)
		}
	})
}

// isFileName tells the plain-file entries of the home list (histories,
// rc files) from directories, for the fixture.
func isFileName(f string) bool {
	switch f {
	case ".pgpass", ".my.cnf", ".netrc", ".npmrc", ".yarnrc", ".pypirc", ".boto", ".s3cfg", ".vault-token",
		".git-credentials", ".authinfo", ".msmtprc", ".fetchmailrc", ".mbsyncrc", ".muttrc", ".Xauthority",
		".ICEauthority", ".env", ".lesshst", ".dbshell", ".databrickscfg", ".sentryclirc", ".terraformrc",
		".smbcredentials", ".rediscli_auth", ".mylogin.cnf", ".claude.json", ".histfile", ".Rhistory":
		return true
	}
	return false
}

// TestItem25_HutchDaemon: the default socket and state directory of hutch
// serve are out of every hutch run sandbox's reach, even where the
// socket's permissions would let the sandbox's user in (mode 0666 here):
// connecting fails and the state directory cannot be listed or read. An
// identical socket elsewhere accepts the sandbox (the control).
func TestItem25_HutchDaemon(t *testing.T) {
	testutil.RequireRoot(t)
	sock := hostSocket(t, "/run/hutch/hutch.sock")
	if sock != nil {
		if err := os.Chmod("/run/hutch", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(sock.addr, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	state := "/var/lib/hutch"
	if !exists(state) {
		testutil.HostRootChanges(t)
		if err := os.MkdirAll(state, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(state) })
		if err := os.WriteFile(filepath.Join(state, "audit.jsonl"), []byte("SECRET-state\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	forEachModeSerially(t, func(t *testing.T, sb *harness) {
		socks := hostDir(t, sb.mode.uid, "sock")
		open := listenUnix(t, filepath.Join(socks, "hutch.sock"))
		a := sb.attacker()
		r := sb.run(opts{}, argv(a, "unix:/run/hutch/hutch.sock", "unix:"+open.addr)+
			"\nls -A /var/lib/hutch 2>/dev/null | sed 's/^/LISTED /'; cat /var/lib/hutch/* 2>/dev/null\n")
		want := map[string][]string{
			"unix:/run/hutch/hutch.sock": {"EACCES", "ECONNREFUSED", "ENOENT"},
			"unix:" + open.addr:          {"ok"},
		}
		if sb.gvisor() {
			// gVisor's kernel connects to no host unix socket (runsc
			// runs without --host-uds): the unprotected one is refused
			// too, and accepts nothing.
			want["unix:"+open.addr] = []string{"ECONNREFUSED"}
		}
		expect(t, r, want)
		if strings.Contains(r.stdout, "LISTED ") || strings.Contains(r.stdout, "SECRET-") {
			t.Errorf("the sandbox read hutch serve's state directory\n%s", r)
		}
		if accepted := open.awaitAccept(5 * time.Second); accepted == sb.gvisor() {
			t.Errorf("the unprotected socket accepted %v from a sandbox of tier %s\n%s", accepted, sb.mode.tier, r)
		}
		if sock != nil && sock.accepted.Load() != 0 {
			t.Errorf("hutch serve's socket accepted a connection from a sandbox")
		}
	})
}

// TestItem07_WorkspaceThroughLink: a workspace entered through a symbolic
// link (a logical $PWD, a linked home) keeps every protection: missing
// shell rc files and .git cannot be created, a tool's settings the
// sandbox creates are set aside, and nothing is left behind — hutch takes
// the workspace by its real path, where its host-side steps follow no
// link (S5).
func TestItem07_WorkspaceThroughLink(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		link := filepath.Join(hostDir(t, sb.mode.uid, "link"), "ws")
		if err := os.Symlink(sb.ws, link); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, sb.ws)
		r := sb.run(opts{dir: link, env: []string{"PWD=" + link}}, tryWrites([]string{".bashrc", ".profile", ".vscode/tasks.json"}, "notes.txt")+
			"mkdir .gemini && echo '{}' > .gemini/settings.json && echo MADE gemini\n")
		noWrites(t, r, []string{".bashrc", ".profile", ".vscode/tasks.json"}, "notes.txt")
		if !strings.Contains(r.stdout, "MADE gemini") || exists(filepath.Join(sb.ws, ".gemini")) || !exists(filepath.Join(sb.ws, ".gemini"+policy.SetAsideSuffix)) {
			t.Errorf(".gemini was not set aside\n%s", r)
		}
		sameTree(t, sb.ws, before, "notes.txt", ".gemini"+policy.SetAsideSuffix, ".gemini"+policy.SetAsideSuffix+"/settings.json")
	})
}
