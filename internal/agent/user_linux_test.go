package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

func TestChownAndOwner(t *testing.T) {
	c, _ := agentPair(t, ServeOptions{}, false)
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "f")
	if _, err := c.WriteFile(ctx, p, strings.NewReader("x"), 0); err != nil {
		t.Fatal(err)
	}
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	if os.Getuid() == 0 {
		uid, gid = 1000, 1000
	}
	if err := c.Chown(ctx, p, uid, gid); err != nil {
		t.Fatalf("chown: %v", err)
	}
	fi, err := c.Stat(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.UID != uid || fi.GID != gid {
		t.Errorf("owner %d:%d, want %d:%d", fi.UID, fi.GID, uid, gid)
	}
	ents, err := c.List(ctx, filepath.Dir(p))
	if err != nil || len(ents) != 1 || ents[0].UID != uid || ents[0].GID != gid {
		t.Errorf("list: %+v, %v", ents, err)
	}
	agentError(t, c.Chown(ctx, p+"-missing", uid, gid), CodeNotFound)
}

func TestExecAsUser(t *testing.T) {
	testutil.RequireRoot(t)
	c, _ := agentPair(t, ServeOptions{}, false)
	res := run(t, c, ExecRequest{Args: []string{"sh", "-c", "id -u; id -g; id -G"}, User: &Credential{UID: 1000, GID: 1001}}, "")
	if res.status.Code != 0 || res.stdout != "1000\n1001\n1001\n" {
		t.Errorf("as 1000:1001: %+v", res)
	}
	res = run(t, c, ExecRequest{Args: []string{"id", "-u"}}, "")
	if res.stdout != "0\n" {
		t.Errorf("without a user: %+v", res)
	}
}
