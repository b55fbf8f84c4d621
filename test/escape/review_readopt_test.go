package escape

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestItem25_ServedAgentSocket (escape items 25 and 27): a served sandbox
// of the namespace tier outlives its daemon, its agent listening on a
// socket in the sandbox's directory for the next daemon, with the token
// that authenticates it kept beside it. Neither is within the sandbox's
// reach, as its root or as uid 1000, by their host paths: connecting
// fails, the token and the directory cannot be read. The control: the
// socket is there and takes the daemon's connection (the sandbox runs a
// command through it).
func TestItem25_ServedAgentSocket(t *testing.T) {
	testutil.RequireRoot(t)
	t.Parallel()
	d := startServed(t, "", false)
	id := d.createCLI()
	a := d.attacker(id)
	dir := filepath.Join(d.stateDir, "sandboxes", id)
	sock, token := filepath.Join(dir, "agent.sock"), filepath.Join(dir, "lasting.json")
	for _, p := range []string{sock, token} {
		if _, err := os.Lstat(p); err != nil {
			t.Fatalf("a served sandbox of the namespace tier outlives its daemon: %v", err)
		}
	}
	for _, who := range [][]string{nil, {"become:1000"}} {
		args := append([]string{"exec", id, "--", a}, who...)
		r := d.client(append(args, "unix:"+sock, "open:"+token, "open:/proc/1/root"+token, "open:"+dir)...)
		denied := []string{"EACCES", "ENOENT", "EPERM"}
		expect(t, r, map[string][]string{
			"unix:" + sock:              {"EACCES", "ENOENT", "ECONNREFUSED"},
			"open:" + token:             denied,
			"open:/proc/1/root" + token: denied,
			"open:" + dir:               denied,
		})
	}
	// Nor does a command get the token in its environment, or read it in
	// the agent's.
	b, err := os.ReadFile(token)
	if err != nil {
		t.Fatal(err)
	}
	var kept struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(b, &kept); err != nil || len(kept.Token) < 32 {
		t.Fatalf("%s holds no token: %v", token, err)
	}
	r := d.client("exec", id, "--", "sh", "-c", "env; cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'")
	if strings.Contains(r.stdout, kept.Token) || strings.Contains(r.stdout, "HUTCH_AGENT_TOKEN") {
		t.Errorf("a command sees the agent's token:\n%s", r)
	}
	// The control: the daemon still drives the sandbox through that socket.
	if r := d.client("exec", id, "--", "echo", "through the agent"); r.code != 0 || !strings.Contains(r.stdout, "through the agent") {
		t.Fatalf("the sandbox's agent does not answer:\n%s", r)
	}
}

// TestItem25_ServedAgentSocketGVisor (escape items 25 and 27): a served
// sandbox of the gVisor tier outlives its daemon too, its agent listening
// on a socket that gVisor's gofer made in a host directory bound into the
// sandbox's view (/dev/hutch-agent), which the daemon made root's once the
// socket was there. From inside, as root or as uid 1000, the socket
// answers no guessed token, cannot be removed, renamed or taken over by a
// socket of the sandbox's own, and nothing new can be bound beside it;
// the host paths of the socket, of the token kept beside the sandbox's
// record and of its bundle directory are out of reach; no command sees
// the token in its environment or in the agent's. The control: the
// host's socket is the same file after the attacks, and the daemon still
// drives the sandbox.
func TestItem25_ServedAgentSocketGVisor(t *testing.T) {
	testutil.RequireRoot(t)
	t.Parallel()
	d := startServed(t, "", false, "--default-tier", "gvisor", "--runsc", testutil.Runsc(t))
	id := d.createCLI()
	a := d.attacker(id)
	token := filepath.Join(d.stateDir, "sandboxes", id, "lasting.json")
	b, err := os.ReadFile(token)
	if err != nil {
		t.Fatalf("a served sandbox of the gVisor tier outlives its daemon: %v", err)
	}
	var kept struct {
		Token  string `json:"token"`
		Handle string `json:"handle"`
	}
	if err := json.Unmarshal(b, &kept); err != nil || len(kept.Token) < 32 || kept.Handle == "" {
		t.Fatalf("%s holds no token or bundle directory: %q, %v", token, b, err)
	}
	hostSock := filepath.Join(kept.Handle, "agent", "agent.sock")
	before, err := os.Lstat(hostSock)
	if err != nil {
		t.Fatalf("the agent's socket on the host: %v", err)
	}
	const inView = "/dev/hutch-agent/agent.sock"
	denied := []string{"EACCES", "ENOENT", "EPERM"}
	for _, who := range [][]string{nil, {"become:1000"}} {
		args := append([]string{"exec", id, "--", a}, who...)
		r := d.client(append(args, "unixguess:"+inView, "unlink:"+inView, "renameaway:"+inView, "unixbind:"+inView,
			"unixbind:/dev/hutch-agent/other.sock", "unix:"+hostSock, "open:"+token, "open:"+kept.Handle, "open:/proc/1/root"+token)...)
		expect(t, r, map[string][]string{
			"unixguess:" + inView:                  {"refused", "EACCES", "ENOENT", "ECONNREFUSED"},
			"unlink:" + inView:                     denied,
			"renameaway:" + inView:                 denied,
			"unixbind:" + inView:                   {"EACCES", "EPERM", "EADDRINUSE"},
			"unixbind:/dev/hutch-agent/other.sock": {"EACCES", "EPERM"},
			"unix:" + hostSock:                     {"EACCES", "ENOENT", "ECONNREFUSED"},
			"open:" + token:                        denied,
			"open:" + kept.Handle:                  denied,
			"open:/proc/1/root" + token:            denied,
		})
	}
	r := d.client("exec", id, "--", "sh", "-c", "env; cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'")
	if strings.Contains(r.stdout, kept.Token) || strings.Contains(r.stdout, "HUTCH_AGENT_TOKEN") {
		t.Errorf("a command sees the agent's token:\n%s", r)
	}
	after, err := os.Lstat(hostSock)
	if err != nil || !os.SameFile(before, after) || after.Mode()&os.ModeSocket == 0 {
		t.Errorf("the agent's socket on the host changed: %v, %v", after, err)
	}
	if r := d.client("exec", id, "--", "echo", "through the agent"); r.code != 0 || !strings.Contains(r.stdout, "through the agent") {
		t.Fatalf("the sandbox's agent does not answer:\n%s", r)
	}
}
