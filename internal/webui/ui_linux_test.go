package webui

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/hutch-sandbox/hutch/client"
	"github.com/hutch-sandbox/hutch/internal/api"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// served is a `hutch serve` a test started: its unix socket (the
// operator's) and a TCP listener on loopback (the tenants').
type served struct {
	sock string
	tcp  string // http://127.0.0.1:PORT
	log  *testutil.Buffer
}

// serve starts `hutch serve` with flags; the test's cleanup stops it as
// an operator would (SIGTERM: it destroys its sandboxes).
func serve(t *testing.T, flags ...string) *served {
	t.Helper()
	testutil.RequireRoot(t)
	dir, err := os.MkdirTemp("", "hutch-ui-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &served{sock: filepath.Join(dir, "s.sock"), log: &testutil.Buffer{}}
	cmd := exec.Command(testutil.Hutch(t), append([]string{"serve", "--socket", s.sock, "--state-dir", filepath.Join(dir, "state"), "--listen", "127.0.0.1:0"}, flags...)...)
	cmd.Stdout, cmd.Stderr = s.log, s.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(guard):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("hutch serve did not end within %s of SIGTERM", guard)
		}
		if t.Failed() {
			t.Logf("hutch serve's log:\n%s", s.log.String())
		}
	})
	if !testutil.Eventually(guard, func() bool {
		for _, l := range strings.Split(s.log.String(), "\n") {
			if addr, ok := strings.CutPrefix(l, "hutch: listening on http://"); ok {
				s.tcp = "http://" + strings.TrimSpace(addr)
			}
		}
		_, err := os.Stat(s.sock)
		// The pages' line follows the listeners' lines: wait for
		// it too rather than read the log between the two.
		return s.tcp != "" && err == nil && strings.Contains(s.log.String(), "hutch: review pages at ")
	}) {
		t.Fatalf("hutch serve did not listen and say where its pages are within %s:\n%s", guard, s.log.String())
	}
	if !strings.Contains(s.log.String(), "hutch: review pages at "+s.tcp+Path+"\n") {
		t.Errorf("hutch serve does not say where its pages are:\n%s", s.log.String())
	}
	return s
}

// tenant makes a token of tenant on the operator's socket and returns
// it with a client of the TCP listener that uses it.
func (d *served) tenant(t *testing.T, ctx context.Context, tenant string) (string, *client.Client) {
	t.Helper()
	admin, err := client.New("unix://"+d.sock, "")
	if err != nil {
		t.Fatal(err)
	}
	token, err := admin.CreateToken(ctx, client.TokenOptions{Tenant: tenant})
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(d.tcp, token)
	if err != nil {
		t.Fatal(err)
	}
	return token, c
}

// TestUI drives the review pages of a real daemon in Chromium: a wrong
// token is refused, the form logs in, the sandbox list shows the
// tenant's sandbox, its page shows the egress refusal of a command it
// ran and its diff against its base — a file written through the API,
// side by side, and a file named as markup shown as text. The API
// refuses the cookie without the pages' header.
func TestUI(t *testing.T) {
	d := serve(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*guard)
	defer cancel()
	token, alice := d.tenant(t, ctx, "alice")
	sb, err := alice.Create(ctx, client.CreateOptions{Labels: map[string]string{"job": "ui-test"}})
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"/workspace/hello.txt": "hello from the sandbox\n", "/workspace/" + hostileName: "<b>bold</b>\n"} {
		if _, err := alice.WriteFile(ctx, sb.ID, name, strings.NewReader(content), 0o644); err != nil {
			t.Fatalf("write %s: %v", name, err)
		}
	}
	// Through the sandbox's proxy, which refuses it (the daemon's
	// sandboxes reach nothing by default).
	res, err := alice.Run(ctx, sb.ID, client.Command{Args: []string{"sh", "-c", "curl -s -m 60 -o /dev/null -w '%{http_code}' http://evil.example/"}})
	if err != nil || !strings.Contains(string(res.Stdout), "403") {
		t.Fatalf("curl in the sandbox: %+v %v", res, err)
	}

	b := newBrowser(t)
	b.do("log in with a wrong token",
		chromedp.Navigate(d.tcp+Path),
		chromedp.SendKeys(chromedp.CSS("#token"), token[:len(token)-1]),
		chromedp.Click(chromedp.CSS("#login-submit")),
		chromedp.WaitVisible(chromedp.CSS("#message")))
	if got := b.text("#message"); got != "That token is not valid." {
		t.Errorf("after a wrong token: %q", got)
	}
	b.login(d.tcp, token)
	b.waitFor(`document.querySelector("#sandboxes tbody tr") !== null`)
	if got := b.text("#sandboxes tbody tr"); !strings.Contains(got, sb.ID) || !strings.Contains(got, "running") || !strings.Contains(got, "job=ui-test") || !strings.Contains(got, "namespace") {
		t.Errorf("the sandbox's row: %q", got)
	}
	b.do("open the sandbox", chromedp.Click(chromedp.CSS(`#sandboxes tr[data-id="`+sb.ID+`"] a`)))
	b.waitFor(`document.querySelector("#diff .filelist") !== null && document.querySelector("#events tr.refused") !== null`)
	if got := b.text("#events tr.refused"); !strings.Contains(got, "evil.example:80") || !strings.Contains(got, "--allow-domain evil.example") {
		t.Errorf("the refusal: %q", got)
	}
	items := eval[[]string](b, `[...document.querySelectorAll("#diff .filelist li")].map((li) => li.textContent.trim())`)
	for _, want := range []string{"added workspace/hello.txt", "added workspace/" + hostileName} {
		if !contains(items, want) {
			t.Errorf("the diff's files %q lack %q", items, want)
		}
	}
	if got := eval[string](b, `document.querySelector('section.file[data-path="workspace/hello.txt"] td.code.add').textContent`); got != "hello from the sandbox" {
		t.Errorf("hello.txt's line: %q", got)
	}
	sec := jsString(`section.file[data-path="workspace/` + hostileName + `"]`)
	if got := eval[string](b, `document.querySelector(`+sec+` + " td.code.add").textContent`); got != "<b>bold</b>" {
		t.Errorf("the hostile file's line: %q", got)
	}
	if n := eval[int](b, `document.querySelectorAll("#diff img, #diff b").length`); n != 0 || eval[string](b, "document.title") == "pwned" {
		t.Errorf("a file's name or contents became markup (%d elements)", n)
	}
	b.screenshot("ui-sandbox.png")

	// Against a snapshot: only what changed since.
	sn, err := alice.Snapshot(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.WriteFile(ctx, sb.ID, "/workspace/later.txt", strings.NewReader("after the snapshot\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b.do("reload the sandbox", chromedp.Reload())
	b.waitFor(`document.querySelector("#snapshots button") !== null`)
	if got := b.text("#snapshots"); !strings.Contains(got, sn.ID) {
		t.Errorf("the snapshots %q lack %s", got, sn.ID)
	}
	b.press("diff against the snapshot", "#snapshots button")
	b.waitFor(`document.querySelector("#diff .filelist") !== null && document.querySelectorAll("#diff .filelist li").length === 1`)
	if got := eval[string](b, `document.querySelector("#diff .filelist").textContent.trim()`); got != "added workspace/later.txt" {
		t.Errorf("the diff against the snapshot: %q", got)
	}

	if got := b.cspRefusals(); len(got) != 0 {
		t.Errorf("the pages break their own Content-Security-Policy: %q", got)
	}

	// The cookie alone opens nothing of the API.
	for _, path := range []string{"/v1/sandboxes", "/ui/v1/sandboxes"} {
		req, err := http.NewRequest(http.MethodGet, d.tcp+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.AddCookie(&http.Cookie{Name: api.UICookie, Value: token})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s with the cookie but not the pages' header: %d, want 403", path, resp.StatusCode)
		}
	}
}

// TestUIChangeSets reviews the change sets of a real daemon's sandboxes
// bound to a host directory (hutch serve --review-workspace) in Chromium:
// the host's files are untouched until Apply writes them; a second set is
// discarded and leaves them alone.
func TestUIChangeSets(t *testing.T) {
	host := t.TempDir()
	for name, content := range map[string]string{"edit.txt": "old\n", "keep.txt": "keep\n"} {
		if err := os.WriteFile(filepath.Join(host, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d := serve(t, "--review-workspace", "app="+host+"@alice")
	ctx, cancel := context.WithTimeout(context.Background(), 5*guard)
	defer cancel()
	token, alice := d.tenant(t, ctx, "alice")
	// set runs script in a new sandbox reviewing the host directory,
	// ends it, and returns its change set.
	set := func(script string) string {
		sb, err := alice.Create(ctx, client.CreateOptions{ReviewWorkspace: "app"})
		if err != nil {
			t.Fatal(err)
		}
		if sb.ChangeSet == "" {
			t.Fatalf("the sandbox names no change set: %+v", sb)
		}
		if res, err := alice.Run(ctx, sb.ID, client.Command{Args: []string{"sh", "-c", script}}); err != nil || res.Code != 0 {
			t.Fatalf("%s: %+v %v", script, res, err)
		}
		if err := alice.Destroy(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		return sb.ChangeSet
	}
	applied := set("echo new > edit.txt && echo added > new.txt")
	discarded := set("echo other > other.txt && rm keep.txt")
	onHost := func() map[string]string {
		out := map[string]string{}
		ents, err := os.ReadDir(host)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(host, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			out[e.Name()] = string(b)
		}
		return out
	}
	if got := onHost(); len(got) != 2 || got["edit.txt"] != "old\n" {
		t.Fatalf("the host's files changed before any apply: %q", got)
	}

	b := newBrowser(t)
	b.login(d.tcp, token)
	b.do("open the change sets", chromedp.Click(chromedp.CSS("#nav-changes")))
	b.waitFor(`document.querySelectorAll("#changes tbody tr").length === 2`)
	b.do("open the first", chromedp.Click(chromedp.CSS(`#changes tr[data-id="`+applied+`"] a`)))
	b.waitFor(`document.querySelector("#diff .filelist") !== null && document.querySelector("#apply") !== null`)
	if got := eval[[]string](b, `[...document.querySelectorAll("#diff .filelist li")].map((li) => li.textContent.trim())`); len(got) != 2 || got[0] != "modified edit.txt" || got[1] != "added new.txt" {
		t.Errorf("the set's files: %q", got)
	}
	row := eval[[]string](b, `[...[...document.querySelectorAll('section.file[data-path="edit.txt"] tr')].find((tr) => tr.querySelector("td.code.del")).cells].map((c) => c.textContent)`)
	if len(row) != 4 || row[1] != "old" || row[3] != "new" {
		t.Errorf("edit.txt side by side: %q", row)
	}
	b.do("apply", chromedp.Click(chromedp.CSS("#apply")), chromedp.WaitVisible(chromedp.CSS("#confirm-yes")), chromedp.Click(chromedp.CSS("#confirm-yes")))
	b.waitFor(`document.querySelector("#result") !== null`)
	if got := b.text("#result"); !strings.Contains(got, "Applied.") || !strings.Contains(got, "new.txt") {
		t.Errorf("the result: %q", got)
	}
	if got := onHost(); len(got) != 3 || got["edit.txt"] != "new\n" || got["new.txt"] != "added\n" || got["keep.txt"] != "keep\n" {
		t.Errorf("the host's files after the apply: %q", got)
	}
	b.screenshot("ui-applied.png")

	b.do("open the second", chromedp.Click(chromedp.CSS("#nav-changes")), chromedp.Click(chromedp.CSS(`#changes tr[data-id="`+discarded+`"] a`)))
	b.waitFor(`document.querySelector("#discard") !== null && !document.querySelector("#discard").disabled`)
	b.do("discard", chromedp.Click(chromedp.CSS("#discard")), chromedp.WaitVisible(chromedp.CSS("#confirm-yes")), chromedp.Click(chromedp.CSS("#confirm-yes")))
	b.waitFor(`document.querySelector("#result") !== null`)
	if _, err := alice.GetChangeSet(ctx, discarded); err == nil {
		t.Error("the discarded set is still there")
	}
	if got := onHost(); len(got) != 3 || got["keep.txt"] != "keep\n" {
		t.Errorf("the host's files after the discard: %q", got)
	}
	if got := b.cspRefusals(); len(got) != 0 {
		t.Errorf("the pages break their own Content-Security-Policy: %q", got)
	}
}
