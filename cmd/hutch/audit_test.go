package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/audit"
)

func TestAuditVerify(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, audit.FileName)
	l, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"sb-1", "sb-2", "sb-3"} {
		if err := l.Append(audit.Entry{Tenant: "admin", Action: "create", Sandbox: id}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	for _, args := range [][]string{{"audit", "verify", "--state-dir", dir}, {"audit", "verify", path}} {
		r := hutch(t, invocation{args: args})
		wantOK(t, r)
		if r.stdout != "audit log OK: 3 entries\n" {
			t.Errorf("hutch %q: stdout %q", args, r.stdout)
		}
	}

	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tampered := filepath.Join(dir, "tampered.jsonl")
	if err := os.WriteFile(tampered, []byte(strings.Replace(string(data), `"sb-2"`, `"sb-9"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	r := hutch(t, invocation{args: []string{"audit", "verify", tampered}})
	wantCode(t, r, 1)
	if !strings.Contains(r.stderr, "line 2") || r.stdout != "" {
		t.Errorf("tampered log: %v", r)
	}

	r = hutch(t, invocation{args: []string{"audit", "verify", "--state-dir", dir, path}})
	wantCode(t, r, 2)
}

// auditEntries are the lines of the audit log in the state directory
// stateDir.
func auditEntries(t *testing.T, stateDir string) []audit.Entry {
	t.Helper()
	f, err := os.Open(filepath.Join(stateDir, audit.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var es []audit.Entry
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e audit.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		es = append(es, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return es
}
