package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestRunCodeCommand runs hutch run-code against hutch serve, in a
// sandbox of the code-interpreter image: output and value, a plot saved
// as a PNG file, an exception, code from stdin, and the refusals.
func TestRunCodeCommand(t *testing.T) {
	t.Parallel() // its daemon is its own; the image's import is shared
	testutil.RequireRoot(t)
	tarball := testutil.CodeInterpreterImage(t)
	d := startDaemonWith(t, importTarball(t, tarball))
	r := d.admin(t, "create", "--image", testutil.CodeInterpreterRef, "--timeout", "10m")
	wantOK(t, r)
	id := lastLine(r.stdout)

	r = d.admin(t, "run-code", id, "-c", "print('hi')\n6 * 7")
	wantOK(t, r)
	if r.stdout != "hi\n42\n" {
		t.Errorf("stdout %q, want the output, then the value", r.stdout)
	}

	// A plot, saved in the current directory (the default of --out).
	dir := t.TempDir()
	r = hutch(t, invocation{dir: dir, env: append(baseEnv(dir), "HUTCH_HOST=unix://"+d.sock), noTTY: true,
		args: []string{"run-code", id, "-c", "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()"}})
	wantOK(t, r)
	pngs, _ := filepath.Glob(filepath.Join(dir, "result-*-*.png"))
	if len(pngs) != 1 || !strings.Contains(r.stderr, "saved "+filepath.Base(pngs[0])) {
		t.Fatalf("PNG files %v; %s", pngs, r)
	}
	if b, err := os.ReadFile(pngs[0]); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("%s: not a PNG file (%v)", pngs[0], err)
	}
	// --out, flags after the id.
	out := t.TempDir()
	r = d.admin(t, "run-code", id, "--out", out, "-c", "import matplotlib.pyplot as plt\nplt.plot([3, 2, 1])\nplt.show()")
	wantOK(t, r)
	if pngs, _ := filepath.Glob(filepath.Join(out, "result-*-*.png")); len(pngs) != 1 {
		t.Errorf("--out: PNG files %v; %s", pngs, r)
	}

	r = d.admin(t, "run-code", id, "-c", "def f():\n    return 1 / 0\nf()")
	wantCode(t, r, 1)
	if !strings.Contains(r.stderr, "ZeroDivisionError: division by zero") || !strings.Contains(r.stderr, "f()") {
		t.Errorf("an exception: %s", r)
	}

	r = d.as(t, "", "", strings.NewReader("import os\nos.environ['N'] + '!'"), "run-code", "-e", "N=5", id, "-")
	wantOK(t, r)
	if strings.Trim(strings.TrimSpace(r.stdout), "'") != "5!" {
		t.Errorf("code from stdin with -e: %s", r)
	}

	// Refusals: a sandbox without kernels, no sandbox, no code.
	r = d.admin(t, "create", "--timeout", "10m")
	wantOK(t, r)
	r = d.admin(t, "run-code", lastLine(r.stdout), "-c", "1")
	wantCode(t, r, 1)
	if !strings.Contains(r.stderr, "no code interpreter") {
		t.Errorf("a sandbox without kernels: %s", r)
	}
	wantCode(t, d.admin(t, "run-code", "sb-nope", "-c", "1"), 1)
	wantCode(t, d.admin(t, "run-code", id), 2)
	wantCode(t, d.admin(t, "run-code", id, "-c", "1", "extra.py"), 2)
}

// TestMCPRunCode: hutch mcp with --image of the code-interpreter image
// lists run_code, and its session sandbox runs code (a plot comes back as
// an image); without such an image it has no run_code.
func TestMCPRunCode(t *testing.T) {
	t.Parallel() // its state and workspace are its own; the image's import is shared
	testutil.RequireRoot(t)
	tarball := testutil.CodeInterpreterImage(t)
	state, ws := hostDir(t), hostDir(t)
	importTarball(t, tarball)(state) // in process: hutch image import of it outlasts the commands' guard
	bin := testutil.Hutch(t)
	hasRunCode := func(c *mcpClient) bool {
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		defer cancel()
		tools, err := c.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tl := range tools.Tools {
			if tl.Name == "run_code" {
				return true
			}
		}
		return false
	}
	if hasRunCode(startMCP(t, bin, t.TempDir())) {
		t.Error("hutch mcp without an image with kernels lists run_code")
	}

	c := startMCP(t, bin, ws, "--image", testutil.CodeInterpreterRef, "--state-dir", state)
	if !hasRunCode(c) {
		t.Fatalf("hutch mcp --image %s lists no run_code", testutil.CodeInterpreterRef)
	}
	out := c.call(t, "run_code", map[string]any{"code": "print('hi')\n6 * 7"})
	results, _ := out["results"].([]any)
	if out["stdout"] != "hi\n" || len(results) != 1 || results[0].(map[string]any)["text"] != "42" {
		t.Errorf("run_code: %v", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	r, err := c.CallTool(ctx, &sdk.CallToolParams{Name: "run_code", Arguments: map[string]any{
		"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()"}})
	if err != nil || r.IsError {
		t.Fatalf("a plot: %v, %+v\n%s", err, r, c.stderr)
	}
	var png bool
	for _, ct := range r.Content {
		if im, ok := ct.(*sdk.ImageContent); ok && im.MIMEType == "image/png" && bytes.HasPrefix(im.Data, []byte("\x89PNG\r\n\x1a\n")) {
			png = true
		}
	}
	if !png {
		t.Errorf("a plot: no PNG image content")
	}
}
