package e2b

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/testutil"
	"github.com/hutch-sandbox/hutch/internal/testutil/storetest"
)

// TestCodeInterpreterImage: E2B's create of the template
// code-interpreter-v1, which the daemon maps to hutch's code-interpreter
// image (scripts/base-image.sh --code-interpreter, named by
// $HUTCH_TEST_CODE_INTERPRETER_IMAGE), starts a sandbox of it whose
// commands run as E2B's user (uid 1000, home and working directory the
// workspace /home/user) with what the code interpreter needs: Python
// imports ipykernel, matplotlib, pandas, numpy and Pillow, matplotlib
// renders a PNG into the workspace with no backend named (its cache in the
// user's home), and node runs TypeScript's compiler from Debian's package
// (which require("typescript") finds).
// The image says the languages it serves and names no matplotlib backend.
func TestCodeInterpreterImage(t *testing.T) {
	tarball := testutil.CodeInterpreterImage(t)
	labels, env := imageTarballConfig(t, tarball)
	if got := labels["org.hutch.code-interpreter"]; got != "python,javascript,typescript" {
		t.Errorf("the image's label org.hutch.code-interpreter is %q, want python,javascript,typescript", got)
	}
	if i := slices.IndexFunc(env, func(e string) bool { return strings.HasPrefix(e, "MPLBACKEND=") }); i >= 0 {
		t.Errorf("the image sets %s: ipykernel's inline backend would not be chosen", env[i])
	}

	agentBin := filepath.Join(filepath.Dir(testutil.Hutch(t)), "hutch-agent")
	f := newRealFixtureWith(t, daemon.Config{AgentBinary: agentBin}, WithTemplates(map[string]string{CodeInterpreterTemplate: CodeInterpreterImage}))
	st, err := image.Open(f.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	storetest.Import(t, tarball, st)
	w := f.as("alice", http.MethodPost, "/sandboxes", `{"templateID":"`+CodeInterpreterTemplate+`"}`)
	if w.Code != http.StatusCreated {
		t.Fatalf("create from %s: %d %s", CodeInterpreterTemplate, w.Code, w.Body)
	}
	var created struct{ SandboxID string }
	if err := json.Unmarshal(w.Body.Bytes(), &created); err != nil {
		t.Fatalf("create answered %s (%v)", w.Body, err)
	}
	ac, err := f.dm.Agent(t.Context(), "alice", created.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ script, want string }{
		{`id -u; pwd; echo "$HOME"`, "1000\n" + Workspace + "\n" + Workspace + "\n"},
		// (debugpy, which ipykernel imports, warns of Python's frozen
		// modules on stderr unless told not to, as the interpreter does.)
		{`PYDEVD_DISABLE_FILE_VALIDATION=1 python3 -c 'import ipykernel, ipykernel.kernelapp, matplotlib_inline.backend_inline, matplotlib.pyplot, pandas, numpy, PIL; print("imported")'`, "imported\n"},
		{`python3 -c '
import matplotlib.pyplot as plt, pandas as pd
pd.DataFrame({"x": [1, 2, 3], "y": [1, 4, 9]}).plot(x="x", y="y")
plt.savefig("plot.png")
' && python3 -c 'from PIL import Image; im = Image.open("plot.png"); print(im.format, im.size)' && ls ~/.cache/matplotlib`,
			"PNG (640, 480)\nfontlist-v330.json\n"},
		{`node -e 'const ts = require("/usr/share/nodejs/typescript"); process.stdout.write(ts.transpileModule("const n: number = 1 + 1; console.log(n)", {}).outputText)' >two.js && node two.js && node -p 'require.resolve("typescript")'`, "2\n/usr/share/nodejs/typescript/lib/typescript.js\n"},
	} {
		out, code := runCombined(t, ac, c.script)
		if code != 0 || out != c.want {
			t.Errorf("%s\nexit %d:\n%s\nwant:\n%s", c.script, code, out, c.want)
		}
	}
}

// runCombined runs a shell command in a sandbox as its default user and
// returns its output (stdout, then stderr) and exit code. The first
// imports of matplotlib and pandas take seconds on a busy machine: its
// bound is generous, not a measure.
func runCombined(t *testing.T, c *agent.Client, cmd string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	p, err := c.Exec(ctx, agent.ExecRequest{Args: []string{"/bin/sh", "-c", cmd}})
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	done := make(chan struct{})
	go func() { _, _ = io.Copy(&stderr, p.Stderr); close(done) }()
	out, _ := io.ReadAll(p.Stdout)
	<-done
	st, err := p.Wait()
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	return string(out) + stderr.String(), st.Code
}

// imageTarballConfig returns the labels and environment of the image in a
// docker save tarball of one image.
func imageTarballConfig(t *testing.T, tarball string) (map[string]string, []string) {
	t.Helper()
	f, err := os.Open(tarball)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", tarball, err)
		}
		if strings.HasSuffix(h.Name, ".json") {
			if files[h.Name], err = io.ReadAll(tr); err != nil {
				t.Fatalf("%s: %s: %v", tarball, h.Name, err)
			}
		}
	}
	var manifest []struct{ Config string }
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil || len(manifest) != 1 {
		t.Fatalf("%s: manifest.json: %v, %d images", tarball, err, len(manifest))
	}
	var config struct {
		Config struct {
			Env    []string
			Labels map[string]string
		}
	}
	if err := json.Unmarshal(files[manifest[0].Config], &config); err != nil {
		t.Fatalf("%s: %s: %v", tarball, manifest[0].Config, err)
	}
	return config.Config.Labels, config.Config.Env
}
