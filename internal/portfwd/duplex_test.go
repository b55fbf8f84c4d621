package portfwd

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestFullDuplex: a proxy's handler that has begun its answer (as a
// streamed answer from a sandbox's server is flushed through at once) can
// still read the rest of the request's body once FullDuplex is on; without
// it net/http's HTTP/1 server has closed the body by then, and a proxied
// request breaks off mid-answer (the break the code interpreter's
// streamed answers showed through the port proxy on a busy machine, which
// E2B's SDK test in cmd/hutch shows end to end).
func TestFullDuplex(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		FullDuplex(w)
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		b, err := io.ReadAll(r.Body)
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		got <- string(b)
	}))
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	// The body's second half goes out only once the answer began.
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhello"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, "200") {
		t.Fatalf("answer: %q %v", line, err)
	}
	if _, err := io.WriteString(c, "world"); err != nil {
		t.Fatal(err)
	}
	var body string
	select {
	case body = <-got:
	case <-time.After(time.Minute):
		t.Fatal("the handler never finished reading")
	}
	c.Close()
	srv.Close()
	if body != "helloworld" {
		t.Errorf("with FullDuplex the handler read %q, want the whole body", body)
	}
}
