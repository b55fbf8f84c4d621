package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/kube"
	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/testutil/k8stest"
)

// TestClusterStore: a daemon whose Config.Store is a cluster's keeps its
// sandboxes' records and its tokens there, where another connection (a
// replica) reads them, and no state.db; a snapshot is refused as
// unsupported, and none is listed.
func TestClusterStore(t *testing.T) {
	srv := k8stest.StartAPIServer(t)
	connect := func() store.Backend {
		c, err := kube.Connect(context.Background(), kube.Options{Kubeconfig: srv.Kubeconfig, Namespace: "default"})
		if err != nil {
			t.Fatal(err)
		}
		return c.Store()
	}
	other := connect()
	m := newManager(t, Config{Store: connect()})
	ctx := testCtx(t)

	info := mustCreate(t, m, "acme", CreateRequest{Labels: map[string]string{"team": "x"}})
	if out := mustRun(t, m, "acme", info.ID, "echo hi"); out != "hi\n" {
		t.Errorf("output %q", out)
	}
	sb, err := other.GetSandbox(ctx, "acme", info.ID)
	if err != nil || sb.State != store.StateRunning || sb.Labels["team"] != "x" || sb.PID <= 0 {
		t.Errorf("the record another connection reads: %+v, %v", sb, err)
	}
	if list, err := m.List(ctx, "acme", map[string]string{"team": "x"}, ""); err != nil || len(list) != 1 || list[0].ID != info.ID {
		t.Errorf("list: %+v, %v", list, err)
	}
	if _, err := os.Stat(filepath.Join(m.cfg.StateDir, "state.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state.db: %v, want none", err)
	}

	tok, err := m.Store().CreateToken(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if tenant, err := other.TenantForToken(ctx, tok); err != nil || tenant != "acme" {
		t.Errorf("the token from another connection: %q, %v", tenant, err)
	}

	if _, err := m.Snapshot(ctx, "acme", info.ID); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "keeps no snapshots") {
		t.Errorf("snapshot: %v, want ErrUnsupported", err)
	}
	if list, err := m.Snapshots(ctx, "acme"); err != nil || len(list) != 0 {
		t.Errorf("snapshots: %+v, %v", list, err)
	}

	if err := m.Destroy(ctx, "acme", info.ID); err != nil {
		t.Fatal(err)
	}
	if sb, err := other.GetSandbox(ctx, "", info.ID); err == nil && sb.State != store.StateStopped {
		t.Errorf("after the destroy the record is %s", sb.State)
	}
}
