//go:build linux

package escape

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Attacks on hutch serve's volumes (E2B's volume and content APIs): what a
// sandbox leaves in a volume (symbolic links out of it, loops, links
// through /proc, FIFOs), paths that climb out, and one volume's token or
// one tenant's key used on another's.

// volumeJSON is E2B's VolumeAndToken.
type volumeJSON struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
	Token    string `json:"token"`
}

// newVolume makes tenant's (token's) volume name.
func (s *served) newVolume(t *testing.T, token, name string) volumeJSON {
	t.Helper()
	status, out := s.do(t, token, "POST", "/volumes", `{"name":"`+name+`"}`)
	if status != http.StatusCreated {
		t.Fatalf("create volume %s: %d %s", name, status, out)
	}
	var v volumeJSON
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// content sends a request of the content API with bearer as the volume
// token; query is the query string (path=... already escaped).
func (s *served) content(t *testing.T, bearer, method, volumeID, what, query, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.url+"/volumecontent/"+volumeID+"/"+what+"?"+query, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := (&http.Client{Timeout: 120 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, req.URL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// stopVolumes stops the daemon and unmounts the volumes it left mounted
// (which outlive a daemon by design), for the test's cleanup.
func (s *served) stopVolumes(t *testing.T) {
	s.stop(t)
	entries, _ := os.ReadDir(filepath.Join(s.stateDir, "volumes", "mnt"))
	for _, e := range entries {
		p := filepath.Join(s.stateDir, "volumes", "mnt", e.Name())
		if err := syscall.Unmount(p, 0); err != nil && err != syscall.EINVAL {
			t.Errorf("unmount %s: %v", p, err)
		}
	}
}

// fileState is what an attack on a host file could change: its mode,
// owner and content.
func fileState(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		return err.Error()
	}
	b, _ := os.ReadFile(path)
	st := fi.Sys().(*syscall.Stat_t)
	return fmt.Sprintf("%v %d:%d %x", fi.Mode(), st.Uid, st.Gid, b)
}

// TestItem07_VolumeContentPaths (S1, S5): E2B's content API resolves every
// path inside the volume. What a sandbox leaves there — symbolic links to
// /etc/shadow, to a host file, up and out with "..", through
// /proc/self/root, a loop, a FIFO — is never followed out of the volume:
// reads, writes, listings, changes of owner or mode and removals through
// them are refused, a stat describes the link itself, and the host files
// they point at are unchanged. Paths that climb ("..", encoded or not)
// stop at the volume's root. A file and a link inside the volume still
// work, so the test can fail. Whatever would change a host file if the
// property broke aims at files of the test's own (/etc/shadow is only
// read). The links are made by a sandbox that mounts
// the volume (volumeMounts) or, while the daemon refuses volumes in
// sandboxes, planted in the volume from the host as a sandbox would.
func TestItem07_VolumeContentPaths(t *testing.T) {
	forEachServedTier(t, func(t *testing.T, tierFlags []string) {
		s := startServed(t, "", true, append([]string{"--volume-size", "32m"}, tierFlags...)...)
		t.Cleanup(func() { s.stopVolumes(t) })
		alice := s.token(t, "alice")
		v := s.newVolume(t, alice, "attacked")
		outside := hostDir(t, 0, "volume-outside")
		target := filepath.Join(outside, "host.txt")
		writeFile(t, target, "host-file-content\n", 0o600, 0)
		before := map[string]string{"/etc/shadow": fileState(t, "/etc/shadow"), target: fileState(t, target)}
		treeBefore := snapshot(t, outside)

		links := map[string]string{
			"shadow": "/etc/shadow", "out": target, "link-out": target, "up": "../../../../../../../..", "updir": "../..",
			"self": "/proc/self/root", "fd": "/proc/self/fd/0", "loop1": "loop2", "loop2": "loop1", "in": "inside.txt",
		}
		script := "cd /mnt/vol && echo inside > inside.txt && mkfifo fifo"
		for name, to := range links {
			script += fmt.Sprintf(" && ln -s '%s' %s", to, name)
		}
		status, out := s.do(t, alice, "POST", "/v2/sandboxes", `{"templateID":"base","volumeMounts":[{"name":"attacked","path":"/mnt/vol"}]}`)
		if status != http.StatusCreated {
			t.Fatalf("create with volumeMounts: %d %s", status, out)
		}
		var sb struct{ SandboxID string }
		_ = json.Unmarshal([]byte(out), &sb)
		if stdout, stderr, code, ok := s.runIn(t, alice, sb.SandboxID, script); !ok || code != 0 {
			t.Fatalf("planting links from the sandbox: %d %s %s", code, stdout, stderr)
		}
		tok := v.Token
		q := func(p string) string { return "path=" + url.QueryEscape(p) }

		// Controls: a file and a link inside the volume.
		if status, body := s.content(t, tok, "GET", v.VolumeID, "file", q("/in"), ""); status != 200 || body != "inside\n" {
			t.Errorf("control: reading a link inside the volume: %d %q", status, body)
		}
		if status, body := s.content(t, tok, "GET", v.VolumeID, "path", q("/shadow"), ""); status != 200 || !strings.Contains(body, `"type":"symlink"`) || !strings.Contains(body, `"target":"/etc/shadow"`) {
			t.Errorf("stat of the link to /etc/shadow: %d %s, want the link itself", status, body)
		}

		// Reads through links and climbing paths.
		for _, p := range []string{
			"/shadow", "/out", "/up/etc/shadow", "/updir/etc/shadow", "/self/etc/shadow", "/fd", "/loop1", "/fifo",
			"../../../../etc/shadow", "/../../../../etc/shadow", "/etc/shadow", "/proc/self/root/etc/shadow",
			"/up" + target, "/self" + target,
		} {
			status, body := s.content(t, tok, "GET", v.VolumeID, "file", q(p), "")
			if status == 200 || strings.Contains(body, "host-file-content") || strings.Contains(body, "root:") {
				t.Errorf("S1 violated: reading %q through the volume: %d %.200q", p, status, body)
			} else if status != 400 && status != 404 {
				t.Errorf("reading %q: %d %s, want 400 or 404", p, status, body)
			}
		}
		// The raw query, encoded dots and slashes as a client may send them.
		for _, raw := range []string{"path=%2e%2e%2f%2e%2e%2fetc%2fshadow", "path=..%2F..%2F..%2Fetc%2Fshadow", "path=%2Fup%2Fetc%2Fshadow", "path=/up/etc/shadow%00"} {
			status, body := s.content(t, tok, "GET", v.VolumeID, "file", raw, "")
			if status == 200 || strings.Contains(body, "root:") {
				t.Errorf("S1 violated: reading ?%s: %d %.200q", raw, status, body)
			}
		}
		// Listings through links that lead out.
		for _, p := range []string{"/up", "/up/etc", "/self", "/updir"} {
			if status, body := s.content(t, tok, "GET", v.VolumeID, "dir", q(p), ""); status == 200 {
				t.Errorf("listing %q through the volume: %d %.300s", p, status, body)
			}
		}
		// Writes and directories through links that lead out.
		for _, p := range []string{"/up" + outside + "/planted", "/self" + outside + "/planted", "/updir/planted"} {
			if status, body := s.content(t, tok, "PUT", v.VolumeID, "file", q(p)+"&force=true", "planted"); status < 400 {
				t.Errorf("writing %q through the volume: %d %s", p, status, body)
			}
			if status, body := s.content(t, tok, "POST", v.VolumeID, "dir", q(p)+"&force=true", ""); status < 400 {
				t.Errorf("mkdir %q through the volume: %d %s", p, status, body)
			}
		}
		// A forced write over a link replaces the link, never its target.
		if status, body := s.content(t, tok, "PUT", v.VolumeID, "file", q("/out")+"&force=true", "replaced"); status != 201 {
			t.Errorf("a forced write over a link: %d %s", status, body)
		}
		// Owner and mode: the last element is not followed, nothing
		// through a link out. (What would change a host file if the
		// property broke aims at the test's own file, never /etc/shadow,
		// which the reads above cover.)
		for _, c := range []struct{ p, body string }{
			{"/link-out", `{"mode":511}`}, {"/up" + target, `{"mode":511}`}, {"/up" + target, `{"uid":1234}`},
			{"/self" + target, `{"uid":1234}`}, {"/updir", `{"mode":511}`}, {"/fd", `{"mode":511}`},
		} {
			if status, body := s.content(t, tok, "PATCH", v.VolumeID, "path", q(c.p), c.body); status == 200 {
				t.Errorf("PATCH %q %s through the volume: %d %s", c.p, c.body, status, body)
			}
		}
		// lchown of a link itself: allowed, and harmless.
		if status, body := s.content(t, tok, "PATCH", v.VolumeID, "path", q("/link-out"), `{"uid":1234,"gid":1234}`); status != 200 {
			t.Errorf("chown of the link itself: %d %s", status, body)
		}
		// Removals: a link is removed, not what it points at; nothing
		// through a link out.
		for _, p := range []string{"/up" + target, "/self" + target, "/up" + outside, "/updir/data"} {
			if status, body := s.content(t, tok, "DELETE", v.VolumeID, "path", q(p), ""); status == 204 {
				t.Errorf("removing %q through the volume: %d %s", p, status, body)
			}
		}
		for _, p := range []string{"/shadow", "/link-out", "/up", "/self", "/loop1"} {
			if status, body := s.content(t, tok, "DELETE", v.VolumeID, "path", q(p), ""); status != 204 {
				t.Errorf("removing the link %q: %d %s", p, status, body)
			}
		}
		if status, body := s.content(t, tok, "DELETE", v.VolumeID, "path", q("/"), ""); status != 400 {
			t.Errorf("removing the volume's root: %d %s", status, body)
		}

		for p, st := range before {
			if now := fileState(t, p); now != st {
				t.Errorf("S1 violated: %s changed through the volume: %s, was %s", p, now, st)
			}
		}
		sameTree(t, outside, treeBefore)
	})
}

// TestItem30_VolumesAcrossTenants (S5): a volume's token opens that volume
// only (not another of its tenant's, not another tenant's; an API key is
// no token), and a tenant cannot see, read, delete or mount another's
// volume by its id or its name: the volume API answers 404 as for a
// volume that does not exist, the content API 401, and a create's
// volumeMounts 404. The owner's requests still work, so the test can fail.
func TestItem30_VolumesAcrossTenants(t *testing.T) {
	forEachServedTier(t, func(t *testing.T, tierFlags []string) {
		s := startServed(t, "", true, append([]string{"--volume-size", "32m"}, tierFlags...)...)
		t.Cleanup(func() { s.stopVolumes(t) })
		alice, bob := s.token(t, "alice"), s.token(t, "bob")
		a1 := s.newVolume(t, alice, "a-one")
		a2 := s.newVolume(t, alice, "a-two")
		b1 := s.newVolume(t, bob, "b-one")
		q := "path=" + url.QueryEscape("/secret.txt")
		if status, body := s.content(t, a1.Token, "PUT", a1.VolumeID, "file", q, "alice-secret"); status != 201 {
			t.Fatalf("control: alice writes her volume: %d %s", status, body)
		}

		// Tokens on the wrong volume, and keys as tokens.
		for what, bearer := range map[string]string{
			"alice's other volume's token": a2.Token, "bob's volume's token": b1.Token,
			"alice's API key": alice, "bob's API key": bob, "no token": "", "a made-up token": strings.Repeat("0", 64),
		} {
			for _, c := range []struct{ method, what, query, body string }{
				{"GET", "file", q, ""}, {"GET", "path", q, ""}, {"GET", "dir", "path=/", ""},
				{"PUT", "file", q + "&force=true", "stolen"}, {"DELETE", "path", q, ""}, {"PATCH", "path", q, `{"mode":511}`},
				{"POST", "dir", "path=/made", ""},
			} {
				status, body := s.content(t, bearer, c.method, a1.VolumeID, c.what, c.query, c.body)
				if status != http.StatusUnauthorized || strings.Contains(body, "alice-secret") {
					t.Errorf("%s on alice's volume, %s %s: %d %.200s, want 401", what, c.method, c.what, status, body)
				}
			}
		}
		// A volume that does not exist answers as a wrong token does.
		if status, _ := s.content(t, b1.Token, "GET", "vol_000000000000000000000000", "file", q, ""); status != http.StatusUnauthorized {
			t.Errorf("an unknown volume: %d, want 401", status)
		}

		// Bob names alice's volume by id and by name.
		for _, ref := range []string{a1.VolumeID, a1.Name} {
			if status, body := s.do(t, bob, "GET", "/volumes/"+ref, ""); status != http.StatusNotFound || strings.Contains(body, a1.Token) {
				t.Errorf("bob gets alice's volume %s: %d %s, want 404", ref, status, body)
			}
			if status, body := s.do(t, bob, "DELETE", "/volumes/"+ref, ""); status != http.StatusNotFound {
				t.Errorf("bob deletes alice's volume %s: %d %s, want 404", ref, status, body)
			}
		}
		if status, body := s.do(t, bob, "GET", "/volumes", ""); status != 200 || strings.Contains(body, a1.VolumeID) || strings.Contains(body, "a-one") {
			t.Errorf("bob's list shows alice's volumes: %d %s", status, body)
		}
		for _, ref := range []string{a1.Name, a1.VolumeID} {
			status, body := s.do(t, bob, "POST", "/v2/sandboxes", `{"templateID":"base","volumeMounts":[{"name":"`+ref+`","path":"/mnt/v"}]}`)
			if status == http.StatusCreated || (status != http.StatusNotFound && status != http.StatusBadRequest) {
				t.Errorf("bob mounts alice's volume %s: %d %s, want 404 (400 for an id, which is no name)", ref, status, body)
			}
		}

		// Alice's volume and file are still hers.
		if status, body := s.content(t, a1.Token, "GET", a1.VolumeID, "file", q, ""); status != 200 || body != "alice-secret" {
			t.Errorf("alice reads her file: %d %q", status, body)
		}
		if status, body := s.do(t, alice, "GET", "/volumes/"+a1.Name, ""); status != 200 || !strings.Contains(body, a1.Token) {
			t.Errorf("alice gets her volume: %d %s", status, body)
		}
	})
}
