package webui

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/hutch-sandbox/hutch/client"
)

// approvalsPolicy asks about touch, allows the rest.
const approvalsPolicy = `{"approvals": {"default": "allow", "commands": [{"ask": ["touch"]}]}}`

// hostileCommand is a command line whose words are markup: shown as
// text, harmless; put into the page as HTML, it would run.
const hostileCommand = `touch '<img src=x onerror=document.title="pwned">'`

// TestUIApprovals answers a real daemon's approvals in Chromium: a
// command of a sandbox whose policy asks about it waits; the approvals
// page shows it (kind, the command, the rule and reason, the time left)
// and the header counts it; Allow once lets it run, and its output
// arrives; on the sandbox's page a command named as markup is shown as
// text, and Deny refuses it: it never runs. Answered questions, here or
// through the API, leave the pages, and the sandbox's events tell of
// them.
func TestUIApprovals(t *testing.T) {
	d := serve(t, "--approval-timeout", "10m")
	ctx, cancel := context.WithTimeout(context.Background(), 5*guard)
	defer cancel()
	token, alice := d.tenant(t, ctx, "alice")
	sb, err := alice.Create(ctx, client.CreateOptions{Policy: json.RawMessage(approvalsPolicy)})
	if err != nil {
		t.Fatal(err)
	}
	type ran struct {
		res *client.Result
		err error
	}
	// run starts line in the sandbox; its result arrives once it was
	// answered.
	run := func(line string) <-chan ran {
		ch := make(chan ran, 1)
		go func() {
			res, err := alice.Run(ctx, sb.ID, client.Command{Args: []string{"sh", "-c", line}})
			ch <- ran{res, err}
		}()
		return ch
	}
	if res, err := alice.Run(ctx, sb.ID, client.Command{Args: []string{"sh", "-c", "echo not asked"}}); err != nil || string(res.Stdout) != "not asked\n" {
		t.Fatalf("a command no rule asks about: %+v %v", res, err)
	}

	b := newBrowser(t)
	b.login(d.tcp, token)
	once := run("touch /workspace/once.txt && echo ran-once")
	b.do("open the approvals", chromedp.Click(chromedp.CSS("#nav-approvals")))
	b.waitFor(`document.querySelectorAll("#approvals li.approval").length === 1 && document.querySelector("#approvals-count").textContent === "1" && getComputedStyle(document.querySelector("#approvals-count")).display !== "none"`)
	if got := eval[string](b, `document.querySelector("#approvals li.approval").dataset.kind`); got != "command" {
		t.Errorf("the question's kind: %q", got)
	}
	item := b.text("#approvals li.approval")
	for _, want := range []string{"in sandbox " + sb.ID, "touch /workspace/once.txt && echo ran-once", "asked about\ntouch /workspace/once.txt", "ask: [touch]", "reason", " left", "Allow once", "Allow for this sandbox", "Always", "Deny"} {
		if !strings.Contains(item, want) {
			t.Errorf("the question lacks %q:\n%s", want, item)
		}
	}
	b.screenshot("ui-approvals.png")
	select {
	case r := <-once:
		t.Fatalf("the command ran before anyone answered: %+v %v", r.res, r.err)
	default:
	}
	b.press("allow once", `#approvals li.approval button[data-answer="once"]`)
	r := <-once
	if r.err != nil || string(r.res.Stdout) != "ran-once\n" || r.res.Code != 0 {
		t.Fatalf("the command allowed once: %+v %v", r.res, r.err)
	}
	b.waitFor(`document.querySelectorAll("#approvals li.approval").length === 0 && getComputedStyle(document.querySelector("#approvals-count")).display === "none"`)

	// On the sandbox's page, a command named as markup.
	eval[string](b, `location.hash = "#/sandboxes/`+sb.ID+`"`)
	hostile := run(hostileCommand)
	b.waitFor(`document.querySelectorAll("#approvals li.approval").length === 1`)
	if got := eval[string](b, `document.querySelector("#approvals li.approval .subject").textContent`); !strings.Contains(got, `<img src=x onerror=document.title="pwned">`) {
		t.Errorf("the hostile command is shown as %q", got)
	}
	if got := eval[string](b, `document.querySelector("#approvals li.approval dd code").textContent`); got != hostileCommand {
		t.Errorf("the hostile command asked about is shown as %q, want %q", got, hostileCommand)
	}
	if n := eval[int](b, `document.querySelectorAll("#approvals img, #events img").length`); n != 0 || eval[string](b, "document.title") == "pwned" {
		t.Errorf("a command line became markup (%d images)", n)
	}
	b.press("deny", `#approvals li.approval button[data-answer="deny"]`)
	r = <-hostile
	if r.err == nil || !strings.Contains(r.err.Error(), "not approved") {
		t.Fatalf("the denied command: %+v %v, want a refusal saying it was not approved", r.res, r.err)
	}
	b.waitFor(`document.querySelectorAll("#approvals li.approval").length === 0`)
	if res, err := alice.Run(ctx, sb.ID, client.Command{Args: []string{"sh", "-c", "ls /workspace"}}); err != nil || string(res.Stdout) != "once.txt\n" {
		t.Errorf("the workspace after the denial: %+v %v (only once.txt should be there)", res, err)
	}

	// Answered elsewhere (the API), a question leaves the page.
	elsewhere := run("touch /workspace/elsewhere.txt && echo ran-elsewhere")
	b.waitFor(`document.querySelectorAll("#approvals li.approval").length === 1`)
	id := eval[string](b, `document.querySelector("#approvals li.approval").dataset.id`)
	if err := alice.Answer(ctx, id, "once"); err != nil {
		t.Fatalf("answer %s through the API: %v", id, err)
	}
	if r := <-elsewhere; r.err != nil || string(r.res.Stdout) != "ran-elsewhere\n" {
		t.Fatalf("the command allowed through the API: %+v %v", r.res, r.err)
	}
	b.waitFor(`document.querySelectorAll("#approvals li.approval").length === 0`)

	b.waitFor(`document.querySelectorAll('#events tr[data-type="approval.answered"]').length === 3`)
	if got := eval[[]string](b, `[...document.querySelectorAll('#events tr[data-type="approval.answered"]')].map((tr) => tr.textContent)`); !strings.Contains(got[0], "once") || !strings.Contains(got[1], "deny") {
		t.Errorf("the answers' events: %q", got)
	}
	b.screenshot("ui-approvals-sandbox.png")
	if got := b.cspRefusals(); len(got) != 0 {
		t.Errorf("the pages break their own Content-Security-Policy: %q", got)
	}
}
