package served

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// TestWaitWarm serves GET /metrics on a unix socket whose pools fill on
// the third look.
func TestWaitWarm(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "hutch.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var looks atomic.Int32
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := min(looks.Add(1)-1, 2)
		fmt.Fprintf(w, "# HELP hutch_warm_sandboxes …\nhutch_warm_sandboxes{template=\"\"} %d\nhutch_warm_sandboxes{template=\"ci\"} %d\nhutch_other 9\n", n, n/2)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	hc := UnixClient(sock)
	ctx := context.Background()
	got, err := WarmSandboxes(ctx, hc)
	if err != nil || len(got) != 2 || got[""] != 0 || got["ci"] != 0 {
		t.Fatalf("first look: %v, %v", got, err)
	}
	if err := WaitWarm(ctx, hc, 1, time.Minute, time.Millisecond, "", "ci"); err != nil {
		t.Fatal(err)
	}
	if looks.Load() != 3 {
		t.Errorf("%d looks, want 3 (the pools full on the third)", looks.Load())
	}
	if err := WaitWarm(ctx, hc, 5, 50*time.Millisecond, time.Millisecond, "ci"); err == nil {
		t.Error("a pool that never fills: no error")
	}
}
