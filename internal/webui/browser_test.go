package webui

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// The tests that drive the pages run them in a real headless Chromium
// (Debian's chromium package), through the DevTools protocol (chromedp).

// guard bounds each step of a test in the browser: generous, for a busy
// machine.
const guard = 2 * time.Minute

// browser is a headless Chromium of one test.
type browser struct {
	t   *testing.T
	ctx context.Context // its tab
}

// newBrowser starts a headless Chromium with a profile of its own; the
// test's cleanup ends it and checks that none of its processes is left.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	testutil.Need(t, err == nil, "needs Chromium (apt-get install chromium)")
	profile, err := os.MkdirTemp("", "hutch-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1400, 1000),
		chromedp.Flag("disable-dev-shm-usage", true),
		// Its temporary files in the profile's directory, which goes
		// with the test, not in /tmp.
		chromedp.Env("TMPDIR="+profile),
	)
	if os.Geteuid() == 0 {
		// Chromium's own sandbox refuses to run as root.
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	// The first action starts the browser; it must not run under a
	// deadline, which would end the browser with it.
	if err := chromedp.Do(ctx); err != nil {
		cancelTab()
		cancelAlloc()
		os.RemoveAll(profile)
		t.Fatalf("start Chromium: %v", err)
	}
	// Every page records what its Content-Security-Policy refused.
	watch := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: cspWatch})
		return err
	})
	if err := chromedp.Do(ctx, watch); err != nil {
		t.Fatalf("watch the pages' CSP: %v", err)
	}
	browserPID := chromedp.FromContext(ctx).Browser.Process().Pid
	t.Cleanup(func() {
		// The browser and every process it started (zygotes,
		// renderers, the GPU and network services) must be gone once
		// it is ended.
		procs := testutil.Descendants(browserPID)
		t.Logf("ending Chromium: %d processes", len(procs))
		cancelTab()
		cancelAlloc()
		var left []int
		if !testutil.Eventually(guard, func() bool {
			left = left[:0]
			for _, p := range procs {
				if p.Alive() {
					left = append(left, p.PID)
				}
			}
			return len(left) == 0
		}) {
			t.Errorf("Chromium processes left after the browser was ended: %v", left)
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		os.RemoveAll(profile)
	})
	return &browser{t: t, ctx: ctx}
}

// cspWatch records in window.hutchCSP each refusal of the page's
// Content-Security-Policy. The browser runs it in every new document
// (DevTools' scripts pass the policy).
const cspWatch = `window.hutchCSP = []; document.addEventListener("securitypolicyviolation", (e) => window.hutchCSP.push(e.effectiveDirective + " " + e.blockedURI));`

// strayValues fails the test if the page shows a value no person should
// read: a JavaScript null, undefined or NaN put in as text.
func (b *browser) strayValues() {
	b.t.Helper()
	text := b.pageText()
	if m := strayValue.FindString(text); m != "" {
		b.t.Errorf("the page shows %q:\n%s", m, text)
	}
}

// strayValue is a JavaScript value shown as text (not /dev/null).
var strayValue = regexp.MustCompile(`(^|[^/\w])(null|undefined|NaN)\b|\[object `)

// cspRefusals returns what the page's policy refused so far.
func (b *browser) cspRefusals() []string {
	b.t.Helper()
	return eval[[]string](b, "window.hutchCSP || []")
}

// do runs steps in the tab, each group bounded by guard; a failure fails
// the test, naming what.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, guard)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// press clicks the first element sel finds, once it exists, through the
// page's own click() rather than a mouse at its coordinates: a page still
// laying itself out (a diff or events arriving above the element) cannot
// move the element from under the click.
func (b *browser) press(what, sel string) {
	b.t.Helper()
	q := strconv.Quote(sel)
	b.waitFor("document.querySelector(" + q + ") !== null")
	if !eval[bool](b, "(() => { const e = document.querySelector("+q+"); if (!e) return false; e.click(); return true; })()") {
		b.t.Fatalf("%s: %s is gone", what, sel)
	}
}

// text is the text of the first element sel finds, once visible.
func (b *browser) text(sel string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, guard)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, guard)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitFor waits until the JavaScript expression is true in the page.
func (b *browser) waitFor(expr string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, guard)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(0))); err != nil {
		b.t.Fatalf("wait for %s: %v\npage text: %s", expr, err, b.pageText())
	}
}

// pageText is the page's text, for a failure's message.
func (b *browser) pageText() string {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	s, _ := chromedp.Run(ctx, chromedp.Evaluate[string]("document.body ? document.body.innerText : ''"))
	return s
}

// login logs in at base's form with token and waits for the pages.
func (b *browser) login(base, token string) {
	b.t.Helper()
	b.do("log in",
		chromedp.Navigate(base+Path),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS("#login-submit")),
		chromedp.WaitVisible(chromedp.CSS("#tenant")),
	)
}

// screenshot saves a PNG of the whole page as name in the test artifacts'
// directory ($HUTCH_TEST_ARTIFACTS, else the test's temporary one) and
// logs where; the page must show no stray value (strayValues).
func (b *browser) screenshot(name string) {
	b.t.Helper()
	b.strayValues()
	ctx, cancel := context.WithTimeout(b.ctx, guard)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	dir := os.Getenv("HUTCH_TEST_ARTIFACTS")
	if dir == "" {
		dir = b.t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", p)
}
