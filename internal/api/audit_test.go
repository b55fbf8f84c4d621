package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/execproto"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// newAuditedEnv is a test environment whose API appends to an audit log at
// the path it returns.
func newAuditedEnv(t *testing.T, origin Origin) (*testEnv, string) {
	t.Helper()
	al, path := openAudit(t)
	return newEnv(t, Config{Audit: al}, origin), path
}

// openAudit opens an audit log, closed when the test ends, and returns
// it with its path.
func openAudit(t *testing.T) (*audit.Log, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), audit.FileName)
	al, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	return al, path
}

// readAudit reads the entries of the audit log at path.
func readAudit(t *testing.T, path string) []audit.Entry {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []audit.Entry
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		var en audit.Entry
		if err := json.Unmarshal(sc.Bytes(), &en); err != nil {
			t.Fatal(err)
		}
		out = append(out, en)
	}
	return out
}

func TestAuditLog(t *testing.T) {
	t.Parallel()
	e, path := newAuditedEnv(t, OriginLocal)

	info := e.create(t, `{"env":{"SECRET_VALUE":"hunter2"}}`)
	res := e.run(t, info.ID, `{"args":["sh","-c","cat; echo 12345; exit 3"],"input":"xyzzy","env":{"TOKEN":"hunter3"}}`)
	if res.ExitCode != 3 {
		t.Fatalf("exec: %+v", res)
	}
	// Reads are not audited; failures are, with their code.
	e.request(t, "GET", "/v1/sandboxes/"+info.ID, nil)
	resp, data := e.request(t, "POST", "/v1/sandboxes/"+info.ID+"/exec", `{"args":[]}`)
	want(t, resp, data, 400, CodeInvalid)
	file := info.Workspace + "/audited.txt"
	resp, data = e.request(t, "PUT", "/v1/sandboxes/"+info.ID+"/files?path="+url.QueryEscape(file), "content")
	if resp.StatusCode/100 != 2 {
		t.Fatalf("write file: %d %s", resp.StatusCode, data)
	}
	resp, data = e.request(t, "DELETE", "/v1/sandboxes/"+info.ID, nil)
	want(t, resp, data, 204, "")

	// A call's entry is appended once its answer went out.
	var (
		n   int
		err error
	)
	testutil.Eventually(time.Minute, func() bool {
		f, oerr := os.Open(path)
		if oerr != nil {
			t.Fatal(oerr)
		}
		defer f.Close()
		n, err = audit.Verify(f)
		return err == nil && n == 5
	})
	if err != nil || n != 5 {
		t.Fatalf("Verify = %d, %v; want 5, nil", n, err)
	}
	raw, _ := os.ReadFile(path)
	for _, secret := range []string{"hunter2", "hunter3", "xyzzy"} {
		if strings.Contains(string(raw), secret) {
			t.Errorf("the log holds %q", secret)
		}
	}
	got := readAudit(t, path)
	if len(got) != 5 {
		t.Fatalf("%d entries, want 5", len(got))
	}
	for i, act := range []string{"create", "exec", "exec", "write_file", "destroy"} {
		if got[i].Action != act || got[i].Tenant != AdminTenant || got[i].Sandbox != info.ID || got[i].Time.IsZero() {
			t.Errorf("entry %d: %+v, want %s by %s on %s", i+1, got[i], act, AdminTenant, info.ID)
		}
	}
	ex := got[1]
	if !slices.Equal(ex.Command, []string{"sh", "-c", "cat; echo 12345; exit 3"}) || ex.ExitCode == nil || *ex.ExitCode != 3 ||
		ex.BytesIn != 5 || ex.BytesOut != 11 || ex.DurationMS < 0 || ex.Error != "" {
		t.Errorf("exec entry: %+v", ex)
	}
	if bad := got[2]; bad.Error != CodeInvalid || bad.ExitCode != nil {
		t.Errorf("failed exec entry: %+v", bad)
	}
	if wf := got[3]; !slices.Equal(wf.Paths, []string{file}) || wf.Error != "" {
		t.Errorf("write_file entry: %+v", wf)
	}
	if got[0].Tier != "namespace" || got[1].Tier != "" {
		t.Errorf("the create's entry names tier %q, the exec's %q; want namespace, none", got[0].Tier, got[1].Tier)
	}
	if got[0].Error != "" || got[3].Error != "" {
		t.Errorf("create, destroy: %+v, %+v", got[0], got[3])
	}
}

func TestAuditExecStream(t *testing.T) {
	t.Parallel()
	e, path := newAuditedEnv(t, OriginLocal)
	id := e.create(t, nil).ID

	s := e.openStream(t, id, `{"args":["sh","-c","cat; exit 4"],"stdin":true}`)
	s.send(t, execproto.TypeStdin, []byte("hello"))
	s.send(t, execproto.TypeStdinEOF, nil)
	if out, _, last := s.finish(t); out != "hello" || exitOf(t, last).ExitCode != 4 {
		t.Fatalf("stdout %q, last frame %+v", out, last)
	}
	// The entry is written once the handler returned, which may be after
	// the client saw the end of the stream.
	var lines []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if lines = strings.SplitAfter(string(data), "\n"); len(lines) == 3 {
			break
		}
	}
	if n, err := audit.Verify(strings.NewReader(strings.Join(lines, ""))); err != nil || n != 2 {
		t.Fatalf("Verify = %d, %v; want 2, nil", n, err)
	}
	var ex audit.Entry
	if err := json.Unmarshal([]byte(lines[1]), &ex); err != nil {
		t.Fatal(err)
	}
	if ex.Action != "exec" || ex.Sandbox != id || ex.ExitCode == nil || *ex.ExitCode != 4 || ex.BytesIn != 5 || ex.BytesOut != 5 ||
		!slices.Equal(ex.Command, []string{"sh", "-c", "cat; exit 4"}) {
		t.Errorf("exec entry: %+v", ex)
	}
}
