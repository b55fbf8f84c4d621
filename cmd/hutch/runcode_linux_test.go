package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestRunCodeCommand runs hutch run-code against hutch serve, in a
// sandbox of the code-interpreter image: output and value, a plot saved
// as a PNG file, an exception, code from stdin, and the refusals.
func TestRunCodeCommand(t *testing.T) {
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
