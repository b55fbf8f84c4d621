//go:build linux

package escape

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestItem08_BootID: a served sandbox has a boot ID of its own — a file
// the daemon binds read-only over /proc/sys/kernel/random/boot_id in the
// namespace tier, gVisor's kernel's own under gVisor — never the host's.
// Its root can neither write it, remount it writable, unmount it nor bind
// something over it (S3: the sandbox's mounts are fixed), so the boot ID
// it reads is the one the daemon gave it, and the host's stays hidden.
func TestItem08_BootID(t *testing.T) {
	host, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	forEachServedTier(t, func(t *testing.T, tier []string) {
		d := startServed(t, "", true, tier...)
		tok := d.token(t, "alice")
		id := d.create(t, tok, `{}`)
		script := `f=/proc/sys/kernel/random/boot_id; before=$(cat $f)
			echo 00000000-0000-4000-8000-000000000000 2>/dev/null >$f && echo WROTE
			mount -o remount,rw,bind $f 2>/dev/null && echo REMOUNTED
			umount $f 2>/dev/null && echo UNMOUNTED
			umount -l $f 2>/dev/null && echo DETACHED
			echo 00000000-0000-4000-8000-000000000000 >/tmp/fake
			mount --bind /tmp/fake $f 2>/dev/null && echo COVERED
			[ "$(cat $f)" = "$before" ] || echo CHANGED
			cat $f`
		out, stderr, code, ok := d.runIn(t, tok, id, script)
		if !ok || code != 0 {
			t.Fatalf("the attack did not run: %d %s", code, stderr)
		}
		for _, bad := range []string{"WROTE", "REMOUNTED", "UNMOUNTED", "DETACHED", "COVERED", "CHANGED"} {
			if strings.Contains(out, bad) {
				t.Errorf("the sandbox's root could change its boot id: %s\n%s", bad, out)
			}
		}
		if strings.Contains(out, strings.TrimSpace(string(host))) {
			t.Errorf("the sandbox sees the host's boot id:\n%s", out)
		}
	})
}

// TestItem30_WakeAcrossTenants: a paused E2B sandbox that traffic may
// resume (autoResume) wakes for its own tenant's envd requests only:
// another tenant's requests naming it — with his own sandbox's access
// token, with his API key, by connect — are refused as for an unknown
// sandbox and leave it paused, and a health check (an oracle anyone with
// the token could poll) wakes nothing either.
func TestItem30_WakeAcrossTenants(t *testing.T) {
	forEachServedTier(t, func(t *testing.T, tier []string) {
		d := startServed(t, "", true, tier...)
		alice, bob := d.token(t, "alice"), d.token(t, "bob")
		create := func(token string) (string, string) {
			status, out := d.do(t, token, "POST", "/v2/sandboxes", `{"templateID":"base","timeout":300,"autoPause":true,"autoResume":{"enabled":true}}`)
			if status != http.StatusCreated {
				t.Fatalf("E2B create: %d %s", status, out)
			}
			var sb struct{ SandboxID, EnvdAccessToken string }
			if err := json.Unmarshal([]byte(out), &sb); err != nil {
				t.Fatal(err)
			}
			return sb.SandboxID, sb.EnvdAccessToken
		}
		id, tok := create(alice)
		_, bobTok := create(bob)
		if status, out := d.do(t, alice, "POST", "/sandboxes/"+id+"/pause", ""); status != http.StatusNoContent {
			t.Fatalf("pause: %d %s", status, out)
		}
		envd := func(path, sandbox, token string) int {
			req, err := http.NewRequest("POST", d.url+path, strings.NewReader(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			if path == "/health" {
				req.Method = "GET"
			}
			req.Header.Set("E2b-Sandbox-Id", sandbox)
			req.Header.Set("X-Access-Token", token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		state := func() string {
			_, out := d.do(t, alice, "GET", "/sandboxes/"+id, "")
			var s struct{ State string }
			_ = json.Unmarshal([]byte(out), &s)
			return s.State
		}
		for what, status := range map[string]int{
			"bob's sandbox's token":    envd("/process.Process/List", id, bobTok),
			"bob's API key":            envd("/process.Process/List", id, bob),
			"no token":                 envd("/process.Process/List", id, ""),
			"alice's token, health":    envd("/health", id, tok),
			"bob's connect (API)":      func() int { s, _ := d.do(t, bob, "POST", "/v2/sandboxes/"+id+"/connect", `{"timeout":60}`); return s }(),
			"bob's resume (API)":       func() int { s, _ := d.do(t, bob, "POST", "/sandboxes/"+id+"/resume", `{}`); return s }(),
			"bob's files (envd)":       envd("/files?path=/etc/hostname", id, bobTok),
			"bob's stat, alice's host": envd("/filesystem.Filesystem/Stat", id, bobTok),
		} {
			if status < 400 {
				t.Errorf("%s: %d, want a refusal", what, status)
			}
		}
		if s := state(); s != "paused" {
			t.Fatalf("after those requests alice's sandbox is %q, want still paused", s)
		}
		// Her own request wakes it.
		if status := envd("/process.Process/List", id, tok); status != http.StatusOK {
			t.Errorf("alice's request to her paused sandbox with autoResume: %d", status)
		}
		if !testutil.Eventually(time.Minute, func() bool { return state() == "running" }) {
			t.Errorf("alice's sandbox is %q after her request", state())
		}
	})
}
