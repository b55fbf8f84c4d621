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
		return s.tcp != "" && err == nil
	}) {
		t.Fatalf("hutch serve did not listen within %s:\n%s", guard, s.log.String())
	}
	if !strings.Contains(s.log.String(), "hutch: review pages at "+s.tcp+Path+"\n") {
		t.Errorf("hutch serve does not say where its pages are:\n%s", s.log.String())
	}
	return s
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
	admin, err := client.New("unix://"+d.sock, "")
	if err != nil {
		t.Fatal(err)
	}
	token, err := admin.CreateToken(ctx, client.TokenOptions{Tenant: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	alice, err := client.New(d.tcp, token)
	if err != nil {
		t.Fatal(err)
	}
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
	b.do("diff against the snapshot", chromedp.Click(chromedp.CSS("#snapshots button")))
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
