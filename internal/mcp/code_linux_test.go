package mcp_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/mcp"
	"github.com/hutch-sandbox/hutch/internal/testutil"
	"github.com/hutch-sandbox/hutch/internal/testutil/storetest"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestRunCodeTool runs code through run_code in a sandbox of hutch's
// code-interpreter image: output and value, a plot as an image content,
// an exception as a result, output cut at the cap, and a sandbox without
// kernels refused.
func TestRunCodeTool(t *testing.T) {
	h := newHarness(t)
	tarball := testutil.CodeInterpreterImage(t)
	storetest.Import(t, tarball, h.m.Images())
	cs := h.cs

	res, err := cs.ListTools(testCtx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	var tool *sdk.Tool
	for _, tl := range res.Tools {
		if tl.Name == "run_code" {
			tool = tl
		}
	}
	if tool == nil || tool.Annotations == nil || tool.Annotations.ReadOnlyHint || tool.Annotations.DestructiveHint == nil || !*tool.Annotations.DestructiveHint ||
		tool.Annotations.OpenWorldHint == nil || !*tool.Annotations.OpenWorldHint || tool.OutputSchema == nil {
		t.Fatalf("run_code: %+v, want it listed with exec's annotations and an output schema", tool)
	}

	var sb mcp.Sandbox
	call(t, cs, "sandbox_create", map[string]any{"image": testutil.CodeInterpreterRef}, &sb)

	var out mcp.RunCodeOut
	r := call(t, cs, "run_code", map[string]any{"sandbox_id": sb.ID, "code": "print('hi')\n1+1"}, &out)
	if out.Stdout != "hi\n" || len(out.Results) != 1 || out.Results[0].Text != "2" || !out.Results[0].IsMainResult || out.Error != nil ||
		!strings.Contains(mcp.ResultText(r), "hi\n") || !strings.Contains(mcp.ResultText(r), "]: 2") {
		t.Errorf("print('hi'); 1+1: %+v\n%s", out, mcp.ResultText(r))
	}

	out = mcp.RunCodeOut{}
	r = call(t, cs, "run_code", map[string]any{"sandbox_id": sb.ID, "code": "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()"}, &out)
	var img *sdk.ImageContent
	for _, c := range r.Content {
		if ic, ok := c.(*sdk.ImageContent); ok {
			img = ic
		}
	}
	if img == nil || img.MIMEType != "image/png" || !bytes.HasPrefix(img.Data, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("a plot: no PNG image content: %+v", r.Content)
	}
	if len(out.Results) == 0 || out.Results[0].Image != 1 || !strings.Contains(strings.Join(out.Results[0].Formats, ","), "png") {
		t.Errorf("a plot: structured %+v", out)
	}

	out = mcp.RunCodeOut{}
	r = call(t, cs, "run_code", map[string]any{"sandbox_id": sb.ID, "code": "x = {}\nx['nope']"}, &out)
	if out.Error == nil || out.Error.Name != "KeyError" || out.Error.Traceback == "" || !strings.Contains(mcp.ResultText(r), "KeyError") {
		t.Errorf("an exception: %+v\n%s", out, mcp.ResultText(r))
	}

	out = mcp.RunCodeOut{}
	call(t, cs, "run_code", map[string]any{"sandbox_id": sb.ID, "code": "import os; print('x' * 20000); os.environ['V']", "env": map[string]any{"V": "set"}}, &out)
	if out.TruncatedBytes == 0 || !strings.Contains(out.Stdout, "bytes cut here") || len(out.Stdout) > 2*maxOut || len(out.Results) != 1 || !strings.Contains(out.Results[0].Text, "set") {
		t.Errorf("long output, env: %d bytes of stdout, %d cut, results %+v", len(out.Stdout), out.TruncatedBytes, out.Results)
	}

	if msg := callErr(t, cs, "run_code", map[string]any{"sandbox_id": sb.ID, "code": "1", "language": "python", "context": "x"}); !strings.Contains(msg, "one of them") {
		t.Errorf("language and context: %s", msg)
	}
	var plain mcp.Sandbox
	call(t, cs, "sandbox_create", nil, &plain)
	if msg := callErr(t, cs, "run_code", map[string]any{"sandbox_id": plain.ID, "code": "1"}); !strings.Contains(msg, "no code interpreter") {
		t.Errorf("a sandbox without kernels: %s", msg)
	}
}

// noInterpreters hides a backend's interpreters, as hutch mcp's backend
// has none.
type noInterpreters struct{ mcp.Backend }

// TestRunCodeNeedsInterpreters checks that a server whose backend reaches
// no code interpreter has no run_code.
func TestRunCodeNeedsInterpreters(t *testing.T) {
	h := newHarness(t)
	o := h.opts
	o.Backend = noInterpreters{h.backend}
	res, err := h.connect(o).ListTools(testCtx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range res.Tools {
		if tl.Name == "run_code" {
			t.Error("run_code listed for a backend without interpreters")
		}
	}
}
