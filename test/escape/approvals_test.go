package escape

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// askedHost is one request of TestItem18_SSRFAskedHosts: the curl of
// `try`, the question it raises on hutch's terminal (none when the answer
// of an earlier one holds), the key that answers it, and the fields of
// the try line.
type askedHost struct {
	name, args string
	asks       string // "host:port" of the question, "" for none
	key        string
	want       map[string]string
}

// TestItem18_SSRFAskedHosts: with network.on_unknown: ask, hutch run asks
// on its controlling terminal about every host no rule allows while the
// proxy holds the connection, and the answer decides, within the address
// guard (S6). A host the person denies is not reached, by plain HTTP or
// SOCKS5; a host the person allows that resolves to a loopback address
// other than the opened 127.0.0.1 (127.0.0.2), or to the metadata address,
// is still refused: an approval opens a name, not the addresses it
// resolves to, and an answer "for this run" that holds for a later
// connection does not open them either. The control: a host allowed once,
// resolving to the opened 127.0.0.1, reaches the upstream, and "once" is
// once: the next request asks again, and is denied. The upstream receives
// only the control's request, and the report holds every decision, made
// on the terminal (or by the answer "for this run").
func TestItem18_SSRFAskedHosts(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		web := startWeb(t, "127.0.0.1:0", nil)
		p := web.port
		dir := hostDir(t, sb.mode.uid, "asked")
		policy := filepath.Join(dir, "policy.yaml")
		writeFile(t, policy, "network:\n  on_unknown: ask\n", 0o644, sb.mode.uid)
		report := filepath.Join(dir, "report.jsonl")
		flags := []string{
			"--policy", policy, "--report", report, "--net", "proxy",
			"--allow-private", "127.0.0.1/32",
			"--add-host", "denied.test:127.0.0.1",
			"--add-host", "loop.test:127.0.0.2",
			"--add-host", "meta.test:169.254.169.254",
			"--add-host", "granted.test:127.0.0.1",
		}
		// curl's own timeout outlasts the question, which waits for the
		// test's answer.
		const wait = "--max-time 120 "
		socks := "-x socks5h://" + socksProxy + " "
		forbidden := func(reason string) map[string]string {
			return map[string]string{"code": "403/000", "blocked": reason}
		}
		steps := []askedHost{
			{"denied", wait + "http://denied.test:" + p + "/asked-denied", "denied.test:" + p, "d", nil},
			{"denied_socks", wait + socks + "http://denied.test:" + p + "/asked-denied-socks", "denied.test:" + p, "d", map[string]string{"rc": "!0", "code": "000/000"}},
			{"loop", wait + "-p http://loop.test:" + p + "/asked-loop", "loop.test:" + p, "o", map[string]string{"code": "000/403", "blocked": "approved,_but_resolves_to_127.0.0.2_(loopback)"}},
			{"meta", wait + "http://meta.test/latest/meta-data/", "meta.test:80", "r", forbidden("approved,_but_resolves_to_169.254.169.254_(metadata)")},
			{"meta_again", wait + socks + "http://meta.test/again", "", "", map[string]string{"rc": "!0", "code": "000/000"}},
			{"granted", wait + "http://granted.test:" + p + "/asked-granted", "granted.test:" + p, "o", map[string]string{"rc": "0", "code": "200/000", "body": "upstream_/asked-granted_"}},
			{"granted_again", wait + "http://granted.test:" + p + "/asked-granted-again", "granted.test:" + p, "d", nil},
		}
		script := curlFn
		for _, s := range steps {
			script += "try " + s.name + " " + s.args + "\n"
		}

		master, tty := openPty(t)
		if err := tty.Chown(sb.mode.uid, sb.mode.uid); err != nil {
			t.Fatal(err)
		}
		args := append(append([]string{"run"}, flags...), "--", "/bin/sh", "-c", script)
		running := sb.start(opts{ctty: tty}, args...)
		tty.Close() // hutch holds the terminal now
		var shown syncBuffer
		go shown.collect(master)
		asked := 0
		for _, s := range steps {
			if s.asks == "" {
				continue
			}
			asked++
			if !waitQuestions(&shown, asked, s.asks) {
				running.cmd.Process.Kill()
				t.Fatalf("question %d, about %s, did not come on the terminal:\n%s", asked, s.asks, shown.String())
			}
			if _, err := master.Write([]byte(s.key)); err != nil {
				t.Fatal(err)
			}
		}
		r := running.wait()
		if r.code != 0 {
			t.Fatalf("hutch run failed:\n%s\n--- terminal:\n%s", r, shown.String())
		}
		c := curls(r.stdout)
		for _, s := range steps {
			want := s.want
			if want == nil {
				// Refused by the person: the gate's refusal, which names
				// the host.
				want = map[string]string{"code": "403/000"}
				if b := c[s.name]["blocked"]; !strings.HasPrefix(b, "network_not_approved:_"+s.asks+":") {
					t.Errorf("curl %s: blocked=%s, want the gate's refusal of %s", s.name, b, s.asks)
				}
			}
			expectCurl(t, r, c, s.name, want)
		}
		if n := strings.Count(shown.String(), "approval needed"); n != asked {
			t.Errorf("%d questions on the terminal, want %d:\n%s", n, asked, shown.String())
		}
		sameSet(t, "loopback HTTP", web, "GET /asked-granted")

		evs := readReport(t, report)
		pn := atoi(t, p)
		notApprovedReason := []string{"not approved"}
		expectReport(t, evs, []blockedWant{
			{"http", "denied.test", pn, notApprovedReason},
			{"socks5", "denied.test", pn, notApprovedReason},
			{"connect", "loop.test", pn, []string{"approved, but resolves to 127.0.0.2 (loopback)"}},
			{"http", "meta.test", 80, []string{"approved, but resolves to 169.254.169.254 (metadata)"}},
			{"socks5", "meta.test", 80, []string{"approved, but resolves to 169.254.169.254 (metadata)"}},
		}, map[string]int{"granted.test": pn})
		var decisions []string
		for _, e := range evs {
			if e.Action == "approval" && e.Kind == "network" {
				decisions = append(decisions, fmt.Sprintf("%s %s by %s %s", e.Subject, e.Decision, e.By, e.Answer))
			}
		}
		want := []string{
			"denied.test:" + p + " deny by terminal deny",
			"denied.test:" + p + " deny by terminal deny",
			"loop.test:" + p + " allow by terminal once",
			"meta.test:80 allow by terminal run",
			"meta.test:80 allow by rule ",
			"granted.test:" + p + " allow by terminal once",
			"granted.test:" + p + " deny by terminal deny",
		}
		if strings.Join(decisions, "\n") != strings.Join(want, "\n") {
			t.Errorf("the report's decisions:\n%s\nwant:\n%s", strings.Join(decisions, "\n"), strings.Join(want, "\n"))
		}
	})
}

// waitQuestions waits until the terminal has shown n questions, the last
// about subject: long, for a question that should come (hutch starts the
// sandbox first, on a busy machine).
func waitQuestions(shown *syncBuffer, n int, subject string) bool {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		out := shown.String()
		if strings.Count(out, "approval needed") == n {
			last := out[strings.LastIndex(out, "approval needed"):]
			if strings.Contains(last, subject) && strings.Contains(last, "[d] deny") {
				return true
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}
