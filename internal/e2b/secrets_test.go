package e2b

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
)

// TestSecrets drives E2B's secrets API: a secret is made, listed, read by
// id or name (any case), given a new version and deleted; no answer ever
// carries its value, which the daemon's file keeps (0600); bad input is
// refused by name; and one tenant's secrets are no other's to see, use,
// change or delete (escape: tenant B cannot reach A's secret).
func TestSecrets(t *testing.T) {
	f := newFixture(t)
	const value = "s3cr3t-value-never-returned"
	type secret struct {
		SecretID       string
		Name           string
		CurrentVersion int64
		Metadata       map[string]string
		CreatedAt      string
		UpdatedAt      string
	}
	decodeOne := func(t *testing.T, _ any, body []byte) secret {
		t.Helper()
		if strings.Contains(string(body), value) {
			t.Errorf("an answer carries the secret's value: %s", body)
		}
		var s secret
		if err := json.Unmarshal(body, &s); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		return s
	}
	w := f.as("alice", "POST", "/secrets", `{"name":"GitHub_Token","value":"`+value+`","metadata":{"team":"a"}}`)
	if w.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", w.Code, w.Body)
	}
	made := decodeOne(t, w, w.Body.Bytes())
	if !strings.HasPrefix(made.SecretID, "sec_") || made.Name != "github_token" || made.CurrentVersion != 1 || made.Metadata["team"] != "a" || made.CreatedAt == "" {
		t.Errorf("create answered %+v", made)
	}
	for _, ref := range []string{made.SecretID, "github_token", "GITHUB_TOKEN"} {
		if w := f.as("alice", "GET", "/secrets/"+ref, ""); w.Code != http.StatusOK || decodeOne(t, w, w.Body.Bytes()).SecretID != made.SecretID {
			t.Errorf("get %s: %d %s", ref, w.Code, w.Body)
		}
	}
	w = f.as("alice", "POST", "/secrets/github_token", `{"value":"`+value+`-2"}`)
	if up := decodeOne(t, w, w.Body.Bytes()); w.Code != http.StatusOK || up.CurrentVersion != 2 || up.Metadata["team"] != "a" {
		t.Errorf("update: %d %s", w.Code, w.Body)
	}
	w = f.as("alice", "POST", "/secrets/"+made.SecretID, `{"value":"`+value+`-3","metadata":{}}`)
	if up := decodeOne(t, w, w.Body.Bytes()); w.Code != http.StatusOK || up.CurrentVersion != 3 || len(up.Metadata) != 0 {
		t.Errorf("update with metadata: %d %s", w.Code, w.Body)
	}

	// Pages of the list, oldest first.
	for _, n := range []string{"b", "c"} {
		if w := f.as("alice", "POST", "/secrets", `{"name":"`+n+`","value":"x"}`); w.Code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", n, w.Code, w.Body)
		}
	}
	var names []string
	for next := ""; ; {
		path := "/secrets?limit=2"
		if next != "" {
			path += "&nextToken=" + next
		}
		w := f.as("alice", "GET", path, "")
		var page []secret
		if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &page) != nil {
			t.Fatalf("list: %d %s", w.Code, w.Body)
		}
		for _, s := range page {
			names = append(names, s.Name)
		}
		if next = w.Header().Get("X-Next-Token"); next == "" {
			break
		}
	}
	if strings.Join(names, ",") != "github_token,b,c" {
		t.Errorf("list: %v", names)
	}

	// Another tenant: nothing of alice's, and a name of its own.
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/secrets/" + made.SecretID, ""}, {"GET", "/secrets/github_token", ""},
		{"POST", "/secrets/" + made.SecretID, `{"value":"stolen"}`}, {"DELETE", "/secrets/github_token", ""},
	} {
		checkError(t, "bob "+c.method+" "+c.path, f.as("bob", c.method, c.path, c.body), http.StatusNotFound)
	}
	if w := f.as("bob", "GET", "/secrets", ""); w.Code != http.StatusOK || strings.TrimSpace(w.Body.String()) != "[]" {
		t.Errorf("bob's list: %d %s", w.Code, w.Body)
	}
	if w := f.as("bob", "POST", "/secrets", `{"name":"github_token","value":"bobs"}`); w.Code != http.StatusCreated {
		t.Errorf("bob's own github_token: %d %s", w.Code, w.Body)
	}

	// Refusals, each naming the problem.
	for _, c := range []struct{ body, want string }{
		{`{"name":"github_token","value":"x"}`, "exists"},
		{`{"name":"bad name","value":"x"}`, "letters, digits"},
		{`{"name":"","value":"x"}`, "letters, digits"},
		{`{"name":"sec_abc","value":"x"}`, "reserved"},
		{`{"name":"novalue"}`, "value is required"},
		{`{"name":"big","value":"` + strings.Repeat("v", maxSecretValue+1) + `"}`, "at most"},
		{`{"name":"md","value":"x","metadata":{"` + strings.Repeat("k", 129) + `":"v"}}`, "metadata: key"},
		{`{"name":"x","value":"x","extra":1}`, "not supported"},
	} {
		msg := checkError(t, c.body[:min(len(c.body), 60)], f.as("alice", "POST", "/secrets", c.body), map[bool]int{true: http.StatusConflict, false: http.StatusBadRequest}[c.want == "exists"])
		if !strings.Contains(msg, c.want) {
			t.Errorf("%.60s: message %q, want %q", c.body, msg, c.want)
		}
	}
	checkError(t, "bad nextToken", f.as("alice", "GET", "/secrets?nextToken=zz", ""), http.StatusBadRequest)
	checkError(t, "no key", f.do("GET", "/secrets", ""), http.StatusUnauthorized)

	// Write-only: the value is in no answer, only in the daemon's file.
	if strings.Contains(f.logs.String(), value) {
		t.Errorf("the daemon's log holds a secret's value")
	}
	file := f.h.secrets.path
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: %v %v", file, fi, err)
	}
	if b, _ := os.ReadFile(file); !strings.Contains(string(b), value+"-3") || strings.Contains(string(b), value+"-2") {
		t.Errorf("the file keeps the current value only")
	}

	if w := f.as("alice", "DELETE", "/secrets/GitHub_Token", ""); w.Code != http.StatusNoContent {
		t.Errorf("delete: %d %s", w.Code, w.Body)
	}
	checkError(t, "get deleted", f.as("alice", "GET", "/secrets/"+made.SecretID, ""), http.StatusNotFound)
	checkError(t, "delete twice", f.as("alice", "DELETE", "/secrets/"+made.SecretID, ""), http.StatusNotFound)
	if b, _ := os.ReadFile(file); strings.Contains(string(b), value) {
		t.Errorf("a deleted secret's value is still in %s", file)
	}
}
