//go:build linux

package escape

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// e2bBuild builds tenant's template name through E2B's template API: the
// archive (a tar of folder/file.txt) uploaded as the SDK uploads it (to
// the link the API gives, without a key), steps (a JSON array) run over
// the base template. It returns the template's and build's ids and the
// build's end: its status, its reason and its log.
func (s *served) e2bBuild(t *testing.T, token, name, steps string) (tid, bid, status, reason, logs string) {
	t.Helper()
	st, out := s.do(t, token, "POST", "/v3/templates", `{"name":"`+name+`"}`)
	var req struct{ TemplateID, BuildID string }
	if st != http.StatusAccepted || json.Unmarshal([]byte(out), &req) != nil {
		t.Fatalf("request a build: %d %s", st, out)
	}
	hash := strings.Repeat("ab", 32)
	st, out = s.do(t, token, "GET", "/templates/"+req.TemplateID+"/files/"+hash, "")
	var link struct{ URL string }
	if st != http.StatusCreated || json.Unmarshal([]byte(out), &link) != nil {
		t.Fatalf("upload link: %d %s", st, out)
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	_ = tw.WriteHeader(&tar.Header{Name: "folder/file.txt", Mode: 0o644, Size: 6, Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte("alice\n"))
	_ = tw.Close()
	put, err := http.NewRequest("PUT", link.URL, &b)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(put)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("upload: %v %v", resp, err)
	}
	resp.Body.Close()
	steps = strings.ReplaceAll(steps, "HASH", hash)
	st, out = s.do(t, token, "POST", "/v2/templates/"+req.TemplateID+"/builds/"+req.BuildID, `{"fromTemplate":"base","steps":`+steps+`}`)
	if st != http.StatusAccepted {
		t.Fatalf("start the build: %d %s", st, out)
	}
	deadline := time.Now().Add(4 * time.Minute)
	for {
		_, out = s.do(t, token, "GET", "/templates/"+req.TemplateID+"/builds/"+req.BuildID+"/status", "")
		var bs struct {
			Status string
			Logs   []string
			Reason *struct{ Message string }
		}
		_ = json.Unmarshal([]byte(out), &bs)
		if bs.Status == "ready" || bs.Status == "error" {
			if bs.Reason != nil {
				reason = bs.Reason.Message
			}
			return req.TemplateID, req.BuildID, bs.Status, reason, strings.Join(bs.Logs, "\n")
		}
		if time.Now().After(deadline) {
			t.Fatalf("the build did not end: %s", out)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// TestItem30_TemplatesAcrossTenants (escape items 30 and 20, for E2B's
// template builds): a build's steps are a sandbox's commands, as confined
// as any (a write to a host path lands in the build's own layer, the
// host's loopback is out of reach); and every call of another tenant that
// names alice's template (its id or name), its build or its upload —
// read, tag, untag, upload, start a build, make public, delete, start a
// sandbox or a build from it — answers exactly what the same call
// answers for one that does not exist, and changes nothing of alice's;
// bob's template of the same name is his own.
func TestItem30_TemplatesAcrossTenants(t *testing.T) {
	d := startServed(t, "", true)
	alice, bob := d.token(t, "alice"), d.token(t, "bob")
	// A host directory the sandbox's view shows (the host's /etc, under
	// its own writable layer), a name nothing else uses.
	target := filepath.Join("/etc", randomName("hutch-escape-template-"))
	t.Cleanup(func() { os.Remove(target) })
	l := listenTCP(t, "127.0.0.1:0")
	steps := `[{"type":"COPY","args":["folder/*","folder","",""],"filesHash":"HASH"},
		{"type":"RUN","args":["echo pwned > ` + target + ` && cat ` + target + `","root"]},
		{"type":"RUN","args":["if (exec 3<>/dev/tcp/` + strings.Replace(l.addr, ":", "/", 1) + `) 2>/dev/null; then echo LOOPBACK-REACHED; else echo LOOPBACK-REFUSED; fi"]}]`
	tid, bid, status, reason, logs := d.e2bBuild(t, alice, "shared-name", steps)
	if status != "ready" {
		t.Fatalf("alice's build: %s %s\n%s", status, reason, logs)
	}
	if !strings.Contains(logs, "\nLOOPBACK-REFUSED\n") || strings.Contains(logs, "\nLOOPBACK-REACHED\n") || l.awaitAccept(time.Second) {
		t.Errorf("a build step reached the host's loopback:\n%s", logs)
	}
	if !strings.Contains(logs, "\npwned\n") {
		t.Errorf("the build step did not write its own %s:\n%s", target, logs)
	}
	if _, err := os.Stat(target); err == nil {
		t.Errorf("a build step as root wrote the host's %s", target)
	}

	const noTID, noBID, noName = "aaaaaaaaaaaaaaaaaaaa", "00000000-0000-4000-8000-000000000000", "no-such-name"
	calls := []struct{ method, path, body string }{
		{"GET", "/templates/TID", ""},
		{"GET", "/templates/TID/tags", ""},
		{"GET", "/templates/TID/builds/BID/status", ""},
		{"GET", "/templates/TID/builds/BID/logs", ""},
		{"GET", "/templates/TID/files/" + strings.Repeat("cd", 32), ""},
		{"PUT", "/templates/TID/files/" + strings.Repeat("ab", 32) + "?token=" + strings.Repeat("0", 48), "x"},
		{"POST", "/v2/templates/TID/builds/BID", `{"steps":[]}`},
		{"PATCH", "/templates/TID", `{"public":false}`},
		{"PATCH", "/v2/templates/TID", `{"public":true}`},
		{"GET", "/templates/aliases/NAME", ""},
		{"POST", "/templates/tags", `{"target":"NAME:default","tags":["x"]}`},
		{"DELETE", "/templates/tags", `{"name":"NAME","tags":["default"]}`},
		{"POST", "/sandboxes", `{"templateID":"NAME"}`},
		{"POST", "/sandboxes", `{"templateID":"TID"}`},
		{"POST", "/sandboxes", `{"templateID":"NAME:default"}`},
		{"DELETE", "/templates/TID", ""},
		{"DELETE", "/templates/NAME", ""},
	}
	fill := func(s, t, b, n string) string { return strings.NewReplacer("TID", t, "BID", b, "NAME", n).Replace(s) }
	norm := strings.NewReplacer(tid, "T", noTID, "T", bid, "B", noBID, "B", "shared-name", "N", noName, "N")
	for _, c := range calls {
		st, got := d.do(t, bob, c.method, fill(c.path, tid, bid, "shared-name"), fill(c.body, tid, bid, "shared-name"))
		stU, unknown := d.do(t, bob, c.method, fill(c.path, noTID, noBID, noName), fill(c.body, noTID, noBID, noName))
		if st != stU || norm.Replace(got) != norm.Replace(unknown) || st/100 == 2 {
			t.Errorf("bob's %s %s: %d %s\nfor an unknown one: %d %s", c.method, c.path, st, got, stU, unknown)
		}
	}
	// A build of bob's from alice's template fails as from one that does
	// not exist.
	for _, from := range []string{"shared-name", tid} {
		st, out := d.do(t, bob, "POST", "/v3/templates", `{"name":"bob-from"}`)
		var req struct{ TemplateID, BuildID string }
		_ = json.Unmarshal([]byte(out), &req)
		if st != http.StatusAccepted {
			t.Fatalf("bob's build request: %d %s", st, out)
		}
		d.do(t, bob, "POST", "/v2/templates/"+req.TemplateID+"/builds/"+req.BuildID, `{"fromTemplate":"`+from+`"}`)
		var bs struct {
			Status string
			Reason *struct{ Message string }
		}
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			_, out = d.do(t, bob, "GET", "/templates/"+req.TemplateID+"/builds/"+req.BuildID+"/status", "")
			_ = json.Unmarshal([]byte(out), &bs)
			if bs.Status == "error" || bs.Status == "ready" {
				break
			}
		}
		if bs.Status != "error" || bs.Reason == nil || !strings.Contains(bs.Reason.Message, "base template "+from+": not found") {
			t.Errorf("bob's build from alice's %s: %s", from, out)
		}
	}
	// Bob's template of the same name is his: a sandbox of his from it
	// has his files, alice's has hers.
	_, _, status, reason, logs = d.e2bBuild(t, bob, "shared-name", `[{"type":"RUN","args":["echo bob > /home/user/who"]}]`)
	if status != "ready" {
		t.Fatalf("bob's build: %s %s\n%s", status, reason, logs)
	}
	for tenant, want := range map[string]string{alice: "alice\n", bob: "bob\n"} {
		st, out := d.do(t, tenant, "POST", "/sandboxes", `{"templateID":"shared-name"}`)
		var sb struct{ SandboxID string }
		if st != http.StatusCreated || json.Unmarshal([]byte(out), &sb) != nil {
			t.Fatalf("create from shared-name: %d %s", st, out)
		}
		o, e, code, ok := d.runIn(t, tenant, sb.SandboxID, "cat /home/user/folder/file.txt /home/user/who 2>/dev/null; true")
		if !ok || o != want {
			t.Errorf("a sandbox from shared-name: %q exit %d (%s), want %q", o, code, e, want)
		}
		d.do(t, tenant, "DELETE", "/sandboxes/"+sb.SandboxID, "")
	}
	if _, out := d.do(t, bob, "GET", "/v2/templates", ""); strings.Contains(out, tid) {
		t.Errorf("bob's list shows alice's template: %s", out)
	}
	if st, out := d.do(t, alice, "GET", "/templates/"+tid+"/tags", ""); st != http.StatusOK || !strings.Contains(out, bid) {
		t.Errorf("alice's template after bob's calls: %d %s", st, out)
	}
}
