//go:build linux

package escape

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestItem30_SnapshotCopyEgress (escape items 26 and 30, for copies of a
// snapshot): a sandbox started from a snapshot — a restored copy of the
// source's memory under gVisor, its files in the namespace tier — sends
// its traffic only through a proxy of its own, with the rules its create
// gave, never through its source's. The source may reach a host-only
// server (the operator opened loopback with --allow-private, and alice
// names it); it holds a connection through its proxy open, tunnelled to
// that server, and keeps sending on it; fresh requests go out every
// 200 ms too. The copy's create allows only example.com: whatever the
// copy sends — on the connection its memory still holds, or afresh —
// must not reach the server, while the source's traffic still does.
func TestItem30_SnapshotCopyEgress(t *testing.T) {
	forEachServedTier(t, func(t *testing.T, tier []string) {
		web := startWeb(t, "127.0.0.1:0", nil)
		d := startServed(t, "", true, append(slices.Clone(tier), "--allow-private", "127.0.0.1/32")...)
		alice := d.token(t, "alice")
		target := "127.0.0.1:" + web.port
		src := d.create(t, alice, `{"policy":{"network":{"allowed_domains":["`+target+`"]}}}`)

		// who names the sender in every request: "source", and "copy" once
		// the copy writes it in its own root.
		loops := `echo source > /tmp/who
(exec 3<>/dev/tcp/127.0.0.1/3128
 printf 'CONNECT ` + target + ` HTTP/1.1\r\nHost: ` + target + `\r\n\r\n' >&3
 while :; do printf 'GET /held-%s HTTP/1.1\r\nHost: ` + target + `\r\n\r\n' "$(cat /tmp/who)" >&3 || exit; sleep 0.2; done) >/dev/null 2>&1 &
(while :; do curl -s -o /dev/null --noproxy '' --proxy http://127.0.0.1:3128 --max-time 5 "http://` + target + `/fresh-$(cat /tmp/who)"; sleep 0.2; done) >/dev/null 2>&1 &`
		if out, errOut, code, ok := d.runIn(t, alice, src, `bash -c `+shq(loops)); !ok || code != 0 {
			t.Fatalf("the source's loops: exit %d %q %q", code, out, errOut)
		}
		saw := func(path string) bool { return slices.Contains(web.received(), "GET "+path) }
		for _, p := range []string{"/held-source", "/fresh-source"} {
			if !testutil.Eventually(time.Minute, func() bool { return saw(p) }) {
				t.Fatalf("the host-only server never got %s from the source: %q", p, web.received())
			}
		}

		status, out := d.do(t, alice, "POST", "/v1/sandboxes/"+src+"/snapshots", "")
		if status != http.StatusCreated {
			t.Fatalf("snapshot: %d %s", status, out)
		}
		var sn struct {
			ID     string
			Memory bool
		}
		_ = json.Unmarshal([]byte(out), &sn)
		if sn.Memory != underGVisor(tier) {
			t.Errorf("the snapshot keeps memory: %v, want %v", sn.Memory, underGVisor(tier))
		}
		cp := d.create(t, alice, `{"snapshot":"`+sn.ID+`","policy":{"network":{"allowed_domains":["example.com"]}}}`)
		if _, _, code, ok := d.runIn(t, alice, cp, "echo copy > /tmp/who"); !ok || code != 0 {
			t.Fatalf("writing the copy's name: exit %d", code)
		}
		// Under gVisor the copy's loops go on, restored with the source's
		// memory (the held connection among it); in the namespace tier the
		// copy's processes start afresh.
		loopsIn := `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' <$f; echo; done | grep -c 'fres[h]-' || true`
		if got, _, _, _ := d.runIn(t, alice, cp, loopsIn); (got != "0\n") != underGVisor(tier) {
			t.Errorf("processes of the source's loops in the copy: %q (tier gVisor: %v)", got, underGVisor(tier))
		}
		// A fresh request from the copy meets its own proxy's refusal.
		probe := `curl -sS -o /dev/null --noproxy '' --proxy http://127.0.0.1:3128 --max-time 20 -w '%{http_code}' http://` + target + `/probe-copy`
		if got, _, _, _ := d.runIn(t, alice, cp, probe); got != "403" {
			t.Errorf("the copy's fresh request: %q, want its proxy's 403", got)
		}
		// The source's traffic goes on meanwhile: wait for more of it, so
		// that the copy's loops (under gVisor, restored) have had as long.
		before := len(web.received())
		if !testutil.Eventually(time.Minute, func() bool {
			n := 0
			for _, r := range web.received()[before:] {
				if strings.HasSuffix(r, "-source") {
					n++
				}
			}
			return n >= 10
		}) {
			t.Errorf("the source's traffic stopped after the copy was made: %q", web.received()[before:])
		}
		if _, _, code, ok := d.runIn(t, alice, cp, "sleep 2"); !ok || code != 0 {
			t.Errorf("the copy stopped answering: exit %d", code)
		}
		for _, r := range web.received() {
			if strings.Contains(r, "copy") {
				t.Errorf("the host-only server got %q from the copy, whose rules allow only example.com", r)
			}
		}
	})
}
