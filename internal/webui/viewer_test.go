package webui

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/hutch-sandbox/hutch/internal/api"
	"github.com/hutch-sandbox/hutch/internal/api/apitest"
	"github.com/hutch-sandbox/hutch/internal/daemon"
)

// hostileName is a file name that is markup: shown as text, it is
// harmless; put into the page as HTML, it would run.
const hostileName = `<img src=x onerror=document.title='pwned'>.txt`

// fixturePatch is what the API answers for a diff, in every form the
// viewer must show: a text change, a new file named as markup, a name
// git quotes, a rename, a mode change, a symbolic link, a binary file, a
// deletion, a file too large to show, and notes outside any file.
var fixturePatch = `diff --git a/src/main.go b/src/main.go
index 1111111..2222222 100644
--- a/src/main.go
+++ b/src/main.go
@@ -1,3 +1,4 @@
 package main
-func old() {}
+func new() {}
+// one more line
 // the end
diff --git a/` + hostileName + ` b/` + hostileName + `
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/` + hostileName + `
@@ -0,0 +1 @@
+<script>document.title='pwned'</script>
diff --git "a/caf\303\251 \"menu\".txt" "b/caf\303\251 \"menu\".txt"
new file mode 100644
index 0000000..4444444
--- /dev/null
+++ "b/caf\303\251 \"menu\".txt"
@@ -0,0 +1 @@
+espresso
diff --git a/old name.txt b/new name.txt
similarity index 100%
rename from old name.txt
rename to new name.txt
diff --git a/run.sh b/run.sh
old mode 100644
new mode 100755
diff --git a/link b/link
new file mode 120000
index 0000000..5555555
--- /dev/null
+++ b/link
@@ -0,0 +1 @@
+../target
\ No newline at end of file
diff --git a/logo.png b/logo.png
new file mode 100644
index 0000000..6666666
Binary files /dev/null and b/logo.png differ (new, 2.0 KiB)
diff --git a/gone.txt b/gone.txt
deleted file mode 100644
index 7777777..0000000
--- a/gone.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
diff --git a/big.bin b/big.bin
File too large to show (20.0 MiB → 20.0 MiB)
new directory assets
refused fifo pipe: never applied
`

// fixtures serves, in front of the API, the diffs and change sets of the
// contract the pages read (GET /v1/sandboxes/{id}/diff, GET /v1/changes,
// GET /v1/changes/{cid}/diff, POST /v1/changes/{cid}/apply, DELETE
// /v1/changes/{cid}), authenticated as the API authenticates: the first
// apply of cs-1 answers with a conflict, the next applies it.
type fixtures struct {
	next    http.Handler
	m       *apitest.Manager
	sandbox string

	mu        sync.Mutex
	applies   []map[string]any // the bodies of the applies
	discarded []string
}

func (f *fixtures) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}/diff", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("format") != "patch" {
			http.Error(w, "format", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, fixturePatch)
	})
	set := func(id string) map[string]any {
		c := map[string]any{"id": id, "tenant": "alice", "sandbox": f.sandbox, "workspace": "app-" + id, "created": "2026-01-02T03:04:05Z",
			"ended": "2026-01-02T04:04:05Z", "counts": map[string]int{"added": 5, "modified": 2, "deleted": 1}, "running": false}
		if id == "cs-1" && len(f.applies) > 2 {
			c["applied"] = "2026-01-02T05:04:05Z"
		}
		return c
	}
	mux.HandleFunc("GET /v1/changes", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		sets := []map[string]any{}
		for _, id := range []string{"cs-1", "cs-2"} {
			if !contains(f.discarded, id) {
				sets = append(sets, set(id))
			}
		}
		json.NewEncoder(w).Encode(map[string]any{"changes": sets})
	})
	mux.HandleFunc("GET /v1/changes/{cid}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		json.NewEncoder(w).Encode(set(r.PathValue("cid")))
	})
	mux.HandleFunc("GET /v1/changes/{cid}/diff", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, fixturePatch)
	})
	mux.HandleFunc("POST /v1/changes/{cid}/apply", func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.applies = append(f.applies, body)
		n := len(f.applies)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		refused := map[string]any{"path": hostileName, "problem": "a protected name", "refused": true}
		switch n {
		case 1:
			w.WriteHeader(http.StatusConflict)
			json.NewEncoder(w).Encode(map[string]any{"code": "conflict", "message": "the workspace changed since the sandbox saw it: nothing was applied",
				"problems": []map[string]any{{"path": "src/main.go", "problem": "changed in the workspace meanwhile"}, refused}})
		case 2:
			w.WriteHeader(http.StatusConflict)
			json.NewEncoder(w).Encode(map[string]any{"code": "conflict", "message": "some paths need your word: nothing was applied", "problems": []map[string]any{refused}})
		default:
			json.NewEncoder(w).Encode(map[string]any{"applied": []string{"src/main.go", hostileName, "new name.txt"}, "skipped": []map[string]any{}})
		}
	})
	mux.HandleFunc("DELETE /v1/changes/{cid}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.discarded = append(f.discarded, r.PathValue("cid"))
		f.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	if _, pattern := mux.Handler(r); pattern == "" {
		f.next.ServeHTTP(w, r)
		return
	}
	if _, err := api.Authenticate(f.m.Store(), r); err != nil {
		api.WriteError(w, r, nil, err)
		return
	}
	mux.ServeHTTP(w, r)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestViewer drives the pages in Chromium over a stand-in daemon and
// fixed diffs: the sandbox list and page (an egress refusal highlighted
// with what would allow it), the side-by-side diff of every kind of
// change, a hostile file name shown as text, a change set's Apply that
// meets a conflict (shown per file), then a refusal, then applies the
// files chosen with the path the operator allowed, and a Discard.
func TestViewer(t *testing.T) {
	f := &fixtures{}
	e := newEnvAs(t, func(next http.Handler, m *apitest.Manager) http.Handler {
		f.next, f.m = next, m
		return f
	}, true)
	info, err := e.m.Create(context.Background(), "alice", daemon.CreateRequest{Labels: map[string]string{"job": "review"}})
	if err != nil {
		t.Fatal(err)
	}
	f.sandbox = info.ID
	e.m.Emit("alice", info.ID, daemon.EventEgressRefused, map[string]any{"protocol": "https", "host": "evil.example", "port": 443, "reason": "not allowed", "allow": "--allow-domain evil.example"})
	b := newBrowser(t)

	// A wrong token: the form again.
	b.do("log in with a wrong token",
		chromedp.Navigate(e.base+Path),
		chromedp.SendKeys(chromedp.CSS("#token"), "hutch_wrong"),
		chromedp.Click(chromedp.CSS("#login-submit")),
		chromedp.WaitVisible(chromedp.CSS("#message")))
	if got := b.text("#message"); got != "That token is not valid." {
		t.Errorf("message after a wrong token: %q", got)
	}
	if n := eval[int](b, `document.querySelectorAll("#tenant").length`); n != 0 {
		t.Error("the pages shown after a wrong token")
	}
	b.login(e.base, e.token)
	if got := b.text("#tenant"); got != "alice" {
		t.Errorf("tenant %q", got)
	}
	// The script cannot read the cookie.
	if c := eval[string](b, "document.cookie"); strings.Contains(c, e.token) {
		t.Errorf("document.cookie holds the token: %q", c)
	}

	b.waitFor(`document.querySelector("#sandboxes tbody tr") !== null`)
	row := b.text("#sandboxes tbody tr")
	for _, want := range []string{info.ID, "running", "job=review", "host root"} {
		if !strings.Contains(row, want) {
			t.Errorf("sandbox row %q lacks %q", row, want)
		}
	}
	b.do("open the sandbox", chromedp.Click(chromedp.CSS("#sandboxes tbody a")))
	b.waitFor(`document.querySelector("#events tr.refused") !== null && document.querySelector("#diff .filelist") !== null`)
	if got := b.text("#events tr.refused"); !strings.Contains(got, "evil.example:443") || !strings.Contains(got, "--allow-domain evil.example") {
		t.Errorf("the refusal's row: %q", got)
	}
	if got := b.text("#refusals"); !strings.Contains(got, "evil.example:443") || !strings.Contains(got, "allow with --allow-domain evil.example") {
		t.Errorf("the refusals: %q", got)
	}
	checkViewer(t, b)
	b.screenshot("viewer-sandbox.png")
	if got := b.cspRefusals(); len(got) != 0 {
		t.Errorf("the pages break their own Content-Security-Policy: %q", got)
	}
	// The policy holds: no inline script runs, nothing loads from
	// another origin.
	eval[bool](b, `(() => { const s = document.createElement("script"); s.textContent = "window.inlineRan = true"; document.body.append(s);
		const i = document.createElement("img"); i.src = "http://192.0.2.1/x.png"; document.body.append(i); return true; })()`)
	b.waitFor(`window.hutchCSP.length >= 2`)
	if eval[bool](b, "window.inlineRan === true") {
		t.Error("an inline script ran")
	}
	if got := b.cspRefusals(); !containsPrefix(got, "script-src-elem") || !containsPrefix(got, "img-src http://192.0.2.1/x.png") {
		t.Errorf("the policy's refusals: %q", got)
	}

	// A change set: the first Apply meets a conflict, shown per file.
	b.do("open the change sets", chromedp.Click(chromedp.CSS("#nav-changes")))
	b.waitFor(`document.querySelectorAll("#changes tbody tr").length === 2`)
	b.do("open cs-1", chromedp.Click(chromedp.CSS(`#changes tr[data-id="cs-1"] a`)))
	b.waitFor(`document.querySelector("#diff .filelist") !== null && document.querySelector("#apply") !== null`)
	checkViewer(t, b)
	// Leave gone.txt out.
	b.do("apply", chromedp.Click(chromedp.CSS(`.filelist li[data-path="gone.txt"] input`)), chromedp.Click(chromedp.CSS("#apply")))
	b.waitFor(`document.querySelector("#confirm") !== null`)
	if got := b.text("#confirm"); !strings.Contains(got, "app-cs-1") {
		t.Errorf("the confirmation %q does not name the workspace", got)
	}
	b.do("confirm", chromedp.Click(chromedp.CSS("#confirm-yes")))
	b.waitFor(`document.querySelector("#conflicts") !== null`)
	if got := b.text("#conflicts"); !strings.Contains(got, "src/main.go — changed in the workspace meanwhile") || !strings.Contains(got, hostileName+" — a protected name") {
		t.Errorf("the conflicts: %q", got)
	}
	if got := eval[[]string](b, `[...document.querySelectorAll(".filelist li.conflict")].map((li) => li.dataset.path)`); len(got) != 2 || got[0] != "src/main.go" || got[1] != hostileName {
		t.Errorf("files marked in conflict: %q", got)
	}
	if n := eval[int](b, `document.querySelectorAll("section.file.conflict").length`); n != 2 {
		t.Errorf("%d sections marked in conflict, want 2", n)
	}
	// A path changed in the workspace cannot be allowed: nothing is
	// offered but to look.
	if n := eval[int](b, `document.querySelectorAll("#conflicts input, #apply-allow, #apply-skip").length`); n != 0 {
		t.Errorf("%d ways offered past a conflict", n)
	}
	b.screenshot("viewer-conflict.png")
	// The workspace is back as the sandbox saw it: only the path that
	// needs the user's word is refused; allow it, and apply again.
	b.do("apply again", chromedp.Click(chromedp.CSS("#apply")), chromedp.WaitVisible(chromedp.CSS("#confirm-yes")), chromedp.Click(chromedp.CSS("#confirm-yes")))
	b.waitFor(`document.querySelector("#apply-allow") !== null`)
	if n := eval[int](b, `document.querySelectorAll("#conflicts input").length`); n != 1 {
		t.Errorf("%d paths may be allowed, want 1 (the refused one)", n)
	}
	if n := eval[int](b, `document.querySelectorAll("#operator-only").length`); n != 0 {
		t.Error("the operator is told that only the operator may apply")
	}
	b.do("allow and apply", chromedp.Click(chromedp.CSS("#conflicts input")), chromedp.Click(chromedp.CSS("#apply-allow")),
		chromedp.WaitVisible(chromedp.CSS("#confirm-yes")), chromedp.Click(chromedp.CSS("#confirm-yes")))
	b.waitFor(`document.querySelector("#result") !== null`)
	if got := b.text("#result"); !strings.Contains(got, "Applied.") || !strings.Contains(got, hostileName) || !strings.Contains(got, "new name.txt") {
		t.Errorf("the result: %q", got)
	}
	if eval[bool](b, `!document.querySelector("#apply").disabled`) || b.text("#status") != "applied" {
		t.Error("Apply is still enabled once applied")
	}
	f.mu.Lock()
	applies := f.applies
	f.mu.Unlock()
	if len(applies) != 3 {
		t.Fatalf("applies %v", applies)
	}
	for i, a := range applies {
		paths, _ := a["paths"].([]any)
		if len(paths) != 8 || contains(anyStrings(paths), "gone.txt") || !contains(anyStrings(paths), hostileName) || !contains(anyStrings(paths), "new name.txt") {
			t.Errorf("the paths of apply %d: %v", i+1, paths)
		}
	}
	for i, want := range []int{0, 0, 1} {
		if allow, _ := applies[i]["allow"].([]any); len(allow) != want || (want == 1 && allow[0] != hostileName) {
			t.Errorf("apply %d allows %v", i+1, allow)
		}
	}

	// Discard the other.
	b.do("open cs-2", chromedp.Click(chromedp.CSS("#nav-changes")), chromedp.Click(chromedp.CSS(`#changes tr[data-id="cs-2"] a`)))
	b.waitFor(`document.querySelector("#discard") !== null`)
	b.do("discard", chromedp.Click(chromedp.CSS("#discard")), chromedp.WaitVisible(chromedp.CSS("#confirm-yes")), chromedp.Click(chromedp.CSS("#confirm-yes")))
	b.waitFor(`document.querySelector("#result") !== null`)
	f.mu.Lock()
	discarded := f.discarded
	f.mu.Unlock()
	if len(discarded) != 1 || discarded[0] != "cs-2" {
		t.Errorf("discarded %v", discarded)
	}

	// A large diff: the files past the first few thousand lines are laid
	// out when they come near the screen.
	var big strings.Builder
	for f := range 40 {
		fmt.Fprintf(&big, "diff --git a/f%d b/f%d\n--- a/f%d\n+++ b/f%d\n@@ -1,100 +1,100 @@\n", f, f, f, f)
		for l := range 100 {
			fmt.Fprintf(&big, "-old %d\n+new %d\n", l, l)
		}
	}
	eval[bool](b, `(() => { const d = document.createElement("div"); d.id = "big"; document.querySelector("#main").replaceChildren(d); HutchDiff.render(d, `+jsString(big.String())+`); return true; })()`)
	last := `document.querySelector('#big section.file[data-path="f39"]')`
	if eval[bool](b, last+`.querySelector("table") !== null`) || !eval[bool](b, last+`.querySelector("div.lazy") !== null`) {
		t.Error("the last file of a large diff was laid out before it came near the screen")
	}
	if n := eval[int](b, `document.querySelectorAll("#big table.sbs").length`); n == 0 || n >= 40 {
		t.Errorf("%d of the 40 files laid out at once", n)
	}
	b.do("jump to the last file", chromedp.Click(chromedp.CSS(`#big .filelist li[data-path="f39"] button.jump`)))
	b.waitFor(last + `.querySelector("table") !== null`)
	if got := eval[int](b, last+`.querySelectorAll("td.code.add").length`); got != 100 {
		t.Errorf("the last file shows %d added lines, want 100", got)
	}

	// Logging out ends it: the form again.
	b.do("log out", chromedp.Click(chromedp.CSS("#logout")), chromedp.WaitVisible(chromedp.CSS("#token")))
	b.do("the pages without the cookie", chromedp.Navigate(e.base+Path+"#/sandboxes"), chromedp.WaitVisible(chromedp.CSS("#token")))
}

// containsPrefix reports whether an element of list starts with prefix.
func containsPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

func anyStrings(list []any) []string {
	var out []string
	for _, x := range list {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

// checkViewer checks the diff viewer showing fixturePatch in #diff.
func checkViewer(t *testing.T, b *browser) {
	t.Helper()
	items := eval[[]string](b, `[...document.querySelectorAll("#diff .filelist li")].map((li) => li.textContent.trim())`)
	want := []string{
		"modified src/main.go",
		"added " + hostileName,
		`added café "menu".txt`,
		"renamed old name.txt → new name.txt",
		"mode changed run.sh",
		"added symbolic link link",
		"added logo.png",
		"deleted gone.txt",
		"modified big.bin",
		"new directory assets",
		"refused fifo pipe: never applied",
	}
	if len(items) != len(want) {
		t.Fatalf("file list %q, want %q", items, want)
	}
	for i := range want {
		if items[i] != want[i] {
			t.Errorf("file list item %d: %q, want %q", i, items[i], want[i])
		}
	}
	// The hostile name and contents are text: no element made of them,
	// nothing run.
	if n := eval[int](b, `document.querySelectorAll("#diff img, #diff script").length`); n != 0 {
		t.Errorf("%d elements made of a file's name or contents", n)
	}
	if title := eval[string](b, "document.title"); title == "pwned" {
		t.Error("a file's name or contents ran as script")
	}
	sec := `section.file[data-path="` + strings.ReplaceAll(hostileName, `'`, `\'`) + `"]`
	if got := eval[string](b, `document.querySelector(`+jsString(sec)+` + " h3 .path").textContent`); got != hostileName {
		t.Errorf("the hostile file's heading %q", got)
	}
	if got := eval[string](b, `document.querySelector(`+jsString(sec)+` + " td.code.add").textContent`); got != "<script>document.title='pwned'</script>" {
		t.Errorf("the hostile file's line %q", got)
	}
	// Side by side: the deleted line faces the line that replaced it.
	row := eval[[]string](b, `[...[...document.querySelectorAll('section.file[data-path="src/main.go"] tr')].find((tr) => tr.querySelector("td.code.del")).cells].map((c) => c.textContent)`)
	if len(row) != 4 || row[0] != "2" || row[1] != "func old() {}" || row[2] != "2" || row[3] != "func new() {}" {
		t.Errorf("the changed line's row %q", row)
	}
	for path, want := range map[string]string{
		"run.sh":   "mode 100644 → mode 100755",
		"logo.png": "Binary files /dev/null and b/logo.png differ (new, 2.0 KiB)",
		"big.bin":  "File too large to show (20.0 MiB → 20.0 MiB)",
	} {
		if got := eval[string](b, `document.querySelector('section.file[data-path="`+path+`"] .meta').textContent`); got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
	if got := eval[string](b, `document.querySelector('section.file[data-path="link"] td.code.add').textContent`); got != "../target" {
		t.Errorf("the link's target %q", got)
	}
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestViewerTenantRefusal: to a tenant, a refused apply shows the refused
// paths and says that only the operator may apply them; it offers no way
// to allow them (the daemon would refuse the word of a tenant), only to
// apply the rest.
func TestViewerTenantRefusal(t *testing.T) {
	f := &fixtures{}
	e := newEnv(t, func(next http.Handler, m *apitest.Manager) http.Handler {
		f.next, f.m = next, m
		return f
	})
	b := newBrowser(t)
	b.login(e.base, e.token)
	if eval[bool](b, `document.body.dataset.operator !== "false"`) {
		t.Error("a tenant's pages act as the operator")
	}
	b.do("open cs-1", chromedp.Click(chromedp.CSS("#nav-changes")))
	b.waitFor(`document.querySelector('#changes tr[data-id="cs-1"] a') !== null`)
	b.do("open cs-1", chromedp.Click(chromedp.CSS(`#changes tr[data-id="cs-1"] a`)))
	b.waitFor(`document.querySelector("#apply") !== null`)
	// The first apply meets a conflict, the second a refusal.
	for range 2 {
		b.do("apply", chromedp.Click(chromedp.CSS("#apply")), chromedp.WaitVisible(chromedp.CSS("#confirm-yes")), chromedp.Click(chromedp.CSS("#confirm-yes")))
		b.waitFor(`document.querySelector("#conflicts") !== null`)
	}
	b.waitFor(`document.querySelector("#apply-skip") !== null`)
	if got := b.text("#conflicts"); !strings.Contains(got, hostileName+" — a protected name") {
		t.Errorf("the refusal: %q", got)
	}
	if got := b.text("#operator-only"); !strings.Contains(got, "Only the daemon's operator may apply these paths") {
		t.Errorf("the refusal says %q", got)
	}
	if n := eval[int](b, `document.querySelectorAll("#conflicts input, #apply-allow").length`); n != 0 {
		t.Errorf("%d ways to allow offered to a tenant", n)
	}
	b.screenshot("viewer-tenant-refusal.png")
	b.do("apply the rest", chromedp.Click(chromedp.CSS("#apply-skip")), chromedp.WaitVisible(chromedp.CSS("#confirm-yes")), chromedp.Click(chromedp.CSS("#confirm-yes")))
	b.waitFor(`document.querySelector("#result") !== null`)
	f.mu.Lock()
	applies := f.applies
	f.mu.Unlock()
	for i, a := range applies {
		if _, ok := a["allow"]; ok {
			t.Errorf("apply %d of a tenant sends allow: %v", i+1, a)
		}
	}
	if len(applies) != 3 || applies[2]["skip_refused"] != true {
		t.Errorf("applies %v, want the third to skip the refused paths", applies)
	}
}
