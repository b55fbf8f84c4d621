package e2b

import (
	"bytes"
	"context"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// signedURL is the /files URL E2B's SDKs make for path, op and user
// (downloadUrl, uploadUrl), signed with token; exp 0: no expiry.
func signedURL(path, op, user, token string, exp int64) string {
	q := url.Values{}
	if path != "" {
		q.Set("path", path)
	}
	if user != "" {
		q.Set("username", user)
	}
	e := ""
	if exp != 0 {
		e = strconv.FormatInt(exp, 10)
		q.Set("signature_expiration", e)
	}
	q.Set("signature", signature(path, op, user, token, e))
	return "/files?" + q.Encode()
}

// form is a multipart body with one file part per name.
func form(names ...string) (string, string) {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for _, n := range names {
		fw, _ := mw.CreateFormFile("file", n)
		fw.Write([]byte("content of " + n))
	}
	mw.Close()
	return b.String(), mw.FormDataContentType()
}

// TestSignedFiles checks signed /files URLs: a signature lets in a
// request without the access token for its sandbox, path, operation and
// user only, until its expiry; E2B's messages for the refusals.
func TestSignedFiles(t *testing.T) {
	f := newRealFixture(t)
	a, tokA := f.create(t, "alice")
	b, tokB := f.create(t, "bob")
	for id, tok := range map[string]string{a: tokA, b: tokB} {
		if w := f.do("POST", "/files?path=hello.txt", "hello "+id, "E2b-Sandbox-Id", id, "X-Access-Token", tok, "Content-Type", "application/octet-stream"); w.Code != http.StatusOK {
			t.Fatalf("write in %s: %d %s", id, w.Code, w.Body)
		}
	}
	refused := func(what string, w *httptest.ResponseRecorder, msg string) {
		t.Helper()
		if got := checkError(t, what, w, http.StatusUnauthorized); msg != "" && got != msg {
			t.Errorf("%s: message %q, want %q", what, got, msg)
		}
	}
	now := time.Now().Unix()

	// Valid: no expiry, a future one; with or without the sandbox named.
	for _, u := range []string{signedURL("hello.txt", "read", "", tokA, 0), signedURL("hello.txt", "read", "", tokA, now+600)} {
		if w := f.do("GET", u, ""); w.Code != http.StatusOK || w.Body.String() != "hello "+a {
			t.Errorf("GET %s: %d %s", u, w.Code, w.Body)
		}
		if w := f.do("GET", u, "", "E2b-Sandbox-Id", a); w.Code != http.StatusOK || w.Body.String() != "hello "+a {
			t.Errorf("GET %s naming %s: %d %s", u, a, w.Code, w.Body)
		}
	}
	if w := f.do("GET", signedURL("hello.txt", "read", "", tokB, 0), ""); w.Code != http.StatusOK || w.Body.String() != "hello "+b {
		t.Errorf("GET signed for %s: %d %s", b, w.Code, w.Body)
	}

	// Expired: E2B's message; a later expiry than signed is no signature.
	refused("expired", f.do("GET", signedURL("hello.txt", "read", "", tokA, now-10), ""), "signature is already expired")
	u := signedURL("hello.txt", "read", "", tokA, now-10)
	u = strings.Replace(u, "signature_expiration="+strconv.FormatInt(now-10, 10), "signature_expiration="+strconv.FormatInt(now+600, 10), 1)
	refused("expiry moved", f.do("GET", u, ""), "invalid signature")
	refused("expiry removed", f.do("GET", strings.Replace(signedURL("hello.txt", "read", "", tokA, now+600), "signature_expiration=", "x=", 1), ""), "invalid signature")
	refused("expiry not a number", f.do("GET", strings.Replace(signedURL("hello.txt", "read", "", tokA, now+600), "signature_expiration=", "signature_expiration=x", 1), ""), "")

	// Another sandbox, path, operation or user.
	refused("another sandbox", f.do("GET", signedURL("hello.txt", "read", "", tokB, 0), "", "E2b-Sandbox-Id", a), "invalid signature")
	refused("another path", f.do("GET", strings.Replace(signedURL("hello.txt", "read", "", tokA, 0), "path=hello.txt", "path=other.txt", 1), ""), "invalid signature")
	refused("another operation", f.do("POST", signedURL("hello.txt", "read", "", tokA, 0), "x", "Content-Type", "application/octet-stream"), "invalid signature")
	refused("another user", f.do("GET", signedURL("hello.txt", "read", "", tokA, 0)+"&username=root", ""), "invalid signature")
	refused("a made-up token", f.do("GET", signedURL("hello.txt", "read", "", strings.Repeat("0", 48), 0), ""), "invalid signature")
	refused("no signature", f.do("GET", "/files?path=hello.txt", ""), "")
	// A signature grants /files only.
	refused("a signed RPC", f.do("POST", "/filesystem.Filesystem/Stat?"+strings.TrimPrefix(signedURL("hello.txt", "read", "", tokA, 0), "/files?"), `{"path":"hello.txt"}`, "Content-Type", "application/json", "E2b-Sandbox-Id", a), "")

	// The request runs as the signature's user: the default one for no
	// username, whatever its Authorization header says.
	body, ct := form("up.txt")
	w := f.do("POST", signedURL("up.txt", "write", "", tokA, now+600), body, "Content-Type", ct, "Authorization", "Basic cm9vdDo=")
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"path":"/home/user/up.txt"`) {
		t.Fatalf("signed upload: %d %s", w.Code, w.Body)
	}
	c, err := f.dm.Agent(context.Background(), "alice", a)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := c.Stat(context.Background(), "/home/user/up.txt"); err != nil || fi.UID != userID {
		t.Errorf("signed upload: %+v, %v; want owned by %d", fi, err, userID)
	}
	body, ct = form("root.txt")
	if w := f.do("POST", signedURL("root.txt", "write", "root", tokA, 0), body, "Content-Type", ct); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"path":"/root/root.txt"`) {
		t.Errorf("signed upload as root: %d %s", w.Code, w.Body)
	}
	// A signed URL with a path writes that one file.
	body, ct = form("first.txt", "/home/user/.bashrc")
	if w := f.do("POST", signedURL("one.txt", "write", "", tokA, 0), body, "Content-Type", ct); w.Code != http.StatusBadRequest {
		t.Errorf("signed upload of two files: %d %s", w.Code, w.Body)
	}
	if got := f.readFile(t, "alice", a, "/home/user/one.txt"); got != "content of first.txt" {
		t.Errorf("one.txt: %q", got)
	}
	if _, err := c.Stat(context.Background(), "/home/user/.bashrc"); err == nil {
		if got := f.readFile(t, "alice", a, "/home/user/.bashrc"); strings.Contains(got, "content of") {
			t.Error("a signed URL for one.txt wrote .bashrc")
		}
	}
	// Once the sandbox is gone its signatures let nothing in.
	f.as("alice", "DELETE", "/sandboxes/"+a, "")
	if w := f.do("GET", signedURL("hello.txt", "read", "", tokA, 0), ""); w.Code == http.StatusOK {
		t.Errorf("GET signed for a killed sandbox: %d %s", w.Code, w.Body)
	}
	if logs := f.logs.String(); strings.Contains(logs, tokA) || strings.Contains(logs, fmt.Sprint(signature("hello.txt", "read", "", tokA, ""))) {
		t.Error("a token or signature is in the log")
	}
}
