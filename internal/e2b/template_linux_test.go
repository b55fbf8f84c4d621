package e2b

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/image/fetch"
	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestMain removes the hutch build TestTemplateImage made.
func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveBuilds()
	os.Exit(code)
}

// TestTemplateImage: E2B's create with a templateID the daemon maps to an
// image starts that image (its files, its user set up as E2B's SDKs
// expect), and the sandbox says which template it is in create's answer
// and in the list; an unknown template is E2B's not-found error.
func TestTemplateImage(t *testing.T) {
	testutil.RequireRoot(t)
	// The image has no C library: the sandboxes' agent is the static
	// hutch-agent.
	agentBin := filepath.Join(filepath.Dir(testutil.Hutch(t)), "hutch-agent")
	f := newRealFixtureWith(t, daemon.Config{AgentBinary: agentBin}, WithTemplates(map[string]string{"bb": "hutch.test/e2b-bb:1"}))
	img := imagetest.Busybox(t, func(ok bool, reason string) { testutil.Need(t, ok, reason) })
	st, err := image.Open(f.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fetch.Import(st, imagetest.DockerSave(t, img, "hutch.test/e2b-bb:1", t.TempDir()), "", fetch.Options{Root: os.Geteuid() == 0}); err != nil {
		t.Fatal(err)
	}
	w := f.as("alice", http.MethodPost, "/sandboxes", `{"templateID":"bb"}`)
	if w.Code != http.StatusCreated {
		t.Fatalf("create from the template: %d %s", w.Code, w.Body)
	}
	var created struct {
		TemplateID, SandboxID string
	}
	if err := json.Unmarshal(w.Body.Bytes(), &created); err != nil || created.TemplateID != "bb" {
		t.Fatalf("create answered %s (%v)", w.Body, err)
	}
	if got := f.readFile(t, "alice", created.SandboxID, "/etc/motd"); got != "from the image\n" {
		t.Errorf("the template's /etc/motd: %q", got)
	}
	if got := f.readFile(t, "alice", created.SandboxID, "/etc/passwd"); !strings.Contains(got, "\nuser:x:1000:1000:") {
		t.Errorf("E2B's user was not set up in the image: %q", got)
	}
	w = f.as("alice", http.MethodGet, "/v2/sandboxes", "")
	if !strings.Contains(w.Body.String(), `"templateID":"bb"`) {
		t.Errorf("the list does not say the template: %d %s", w.Code, w.Body)
	}
	// The audit log says which image the sandbox started from.
	digest, _ := img.Digest()
	found := false
	testutil.Eventually(time.Minute, func() bool {
		for _, e := range readAudit(t, f.auditPath) {
			if e.Action == "create" && e.Sandbox == created.SandboxID && e.Image == digest.String() {
				found = true
			}
		}
		return found
	})
	if !found {
		t.Errorf("no create entry with the image %s in the audit log", digest)
	}
	w = f.as("alice", http.MethodPost, "/sandboxes", `{"templateID":"nope"}`)
	if w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), "bb") {
		t.Errorf("an unknown template: %d %s", w.Code, w.Body)
	}
}
