package portfwd

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// backend is a server standing in for one inside a sandbox: it echoes
// what it got, redirects, and switches to an echo protocol on Upgrade.
func backend(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "path=%s query=%s host=%s auth=%q proxy-auth=%q", r.URL.EscapedPath(), r.URL.RawQuery, r.Host, r.Header.Get("Authorization"), r.Header.Get("Proxy-Authorization"))
	})
	mux.HandleFunc("/a%2Fb", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "raw=%s", r.URL.EscapedPath())
	})
	mux.HandleFunc("/to-path", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/login?next=1", http.StatusFound)
	})
	mux.HandleFunc("/to-self", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://localhost:8080/home", http.StatusFound)
	})
	mux.HandleFunc("/to-else", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://example.test/x", http.StatusFound)
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "want Upgrade: echo", http.StatusBadRequest)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		_ = brw.Flush()
		_, _ = io.Copy(c, brw)
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// front serves h under /ports/ on the loopback, as hutch serve would.
func front(t *testing.T, h *Handler) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/ports/", http.StripPrefix("/ports", h))
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	t.Cleanup(h.Close)
	return s
}

func dialTo(addr string) DialFunc {
	return func(ctx context.Context) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}
}

// noRedirect is a client that returns redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func get(t *testing.T, url string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestHandlerProxies(t *testing.T) {
	be := backend(t)
	h := NewHandler()
	fe := front(t, h)
	base := fe.URL + "/ports/"
	u, err := h.URL(base, "sb-1", 8080, dialTo(be.Listener.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(u, base) || !strings.HasSuffix(u, "/") || len(u) != len(base)+48+1 {
		t.Fatalf("URL %q: want %s + 48 hex digits + /", u, base)
	}
	if again, _ := h.URL(base, "sb-1", 8080, nil); again != u {
		t.Errorf("the same port's URL again: %q, want %q", again, u)
	}
	other, _ := h.URL(base, "sb-1", 8081, dialTo(be.Listener.Addr().String()))
	if other == u {
		t.Errorf("another port got the same URL %q", u)
	}

	resp, body := get(t, u+"echo?x=1&y=%2F", "Authorization", "Bearer daemon-token", "Proxy-Authorization", "Basic eA==")
	want := `path=/echo query=x=1&y=%2F host=localhost:8080 auth="" proxy-auth=""`
	if resp.StatusCode != 200 || body != want {
		t.Errorf("GET echo: %d %q, want %q", resp.StatusCode, body, want)
	}
	if _, body := get(t, u+"a%2Fb"); body != "raw=/a%2Fb" {
		t.Errorf("an escaped path reached the server as %q", body)
	}

	// Redirects to the server's own paths stay under the URL; others are
	// left alone.
	tokPath := strings.TrimPrefix(u, fe.URL)
	for path, loc := range map[string]string{
		"to-path": tokPath + "login?next=1",
		"to-self": u + "home",
		"to-else": "http://example.test/x",
	} {
		resp, _ := get(t, u+path)
		if got := resp.Header.Get("Location"); resp.StatusCode != http.StatusFound || got != loc {
			t.Errorf("%s: %d Location %q, want %q", path, resp.StatusCode, got, loc)
		}
	}
	// The URL without its last slash redirects to it.
	resp, _ = get(t, strings.TrimSuffix(u, "/"))
	if got := resp.Header.Get("Location"); resp.StatusCode != http.StatusPermanentRedirect || got != tokPath {
		t.Errorf("without its slash: %d Location %q, want %q", resp.StatusCode, got, tokPath)
	}

	// Unknown tokens, and every URL of a sandbox once forgotten, are 404.
	if resp, _ := get(t, base+strings.Repeat("0", 48)+"/echo"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("an unknown token: %d, want 404", resp.StatusCode)
	}
	h.Forget("sb-1")
	for _, x := range []string{u, other} {
		if resp, _ := get(t, x+"echo"); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s after Forget: %d, want 404", x, resp.StatusCode)
		}
	}
}

// TestHandlerUpgrade: a protocol switch (as a WebSocket's) carries bytes
// both ways through the Handler.
func TestHandlerUpgrade(t *testing.T) {
	be := backend(t)
	h := NewHandler()
	fe := front(t, h)
	u, err := h.URL(fe.URL+"/ports/", "sb-2", 3000, dialTo(be.Listener.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", fe.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	path := strings.TrimPrefix(u, fe.URL) + "ws"
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n", path, fe.Listener.Addr())
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("upgrade: %s %s", resp.Status, b)
	}
	for _, msg := range []string{"ping", "pong and more"} {
		if _, err := io.WriteString(c, msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != msg {
			t.Fatalf("echo of %q: %q %v", msg, got, err)
		}
	}
}

// TestHandlerDialFails: a port nothing listens on is 502 with the reason.
func TestHandlerDialFails(t *testing.T) {
	h := NewHandler()
	fe := front(t, h)
	u, err := h.URL(fe.URL+"/ports/", "sb-3", 9, func(context.Context) (net.Conn, error) {
		return nil, fmt.Errorf("port 9: %w", ErrNotListening)
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, body := get(t, u)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "nothing listens on port 9 in sandbox sb-3") {
		t.Errorf("%d %q", resp.StatusCode, body)
	}
}

func TestHandlerBadArguments(t *testing.T) {
	h := NewHandler()
	for _, c := range []struct {
		base string
		port int
	}{
		{"http://127.0.0.1/ports/", 0},
		{"http://127.0.0.1/ports/", 65536},
		{"/ports/", 80},
		{"http://127.0.0.1/ports", 80},
		{"::", 80},
	} {
		if u, err := h.URL(c.base, "sb", c.port, nil); err == nil {
			t.Errorf("URL(%q, %d) = %q, want an error", c.base, c.port, u)
		}
	}
}

// TestHandlerExpiryAndBounds: a URL published until a time answers 404
// once it passed, and the next call publishes a new one; one sandbox gets
// at most MaxPortsPerSandbox ports, another sandbox its own.
func TestHandlerExpiryAndBounds(t *testing.T) {
	h := NewHandler()
	fe := httptest.NewServer(http.StripPrefix("/ports", h))
	defer fe.Close()
	base := fe.URL + "/ports/"
	past := time.Now().Add(-time.Second)
	u, err := h.URLUntil(base, "sb", 80, nil, past)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("an expired URL answered %d, want 404", resp.StatusCode)
	}
	again, err := h.URLUntil(base, "sb", 80, nil, time.Now().Add(time.Hour))
	if err != nil || again == u {
		t.Errorf("after expiry: %q, %v; want a new URL", again, err)
	}
	for p := 81; p < 80+MaxPortsPerSandbox; p++ {
		if _, err := h.URL(base, "sb", p, nil); err != nil {
			t.Fatalf("port %d: %v", p, err)
		}
	}
	if _, err := h.URL(base, "sb", 9999, nil); err == nil || !strings.Contains(err.Error(), "ports of sandbox sb") {
		t.Errorf("port %d of one sandbox: %v, want refused", MaxPortsPerSandbox+1, err)
	}
	if _, err := h.URL(base, "other", 9999, nil); err != nil {
		t.Errorf("another sandbox's port: %v", err)
	}
}
