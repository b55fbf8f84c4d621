package microvm

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestBootShare boots a guest whose root is the host's system directories
// over virtiofs and whose workspace is a host directory: a command runs in
// the workspace, writes there reach the host with the command's ids,
// writes elsewhere stay in the guest, and a hidden file reads empty.
func TestBootShare(t *testing.T) {
	k := needVM(t)
	ws := t.TempDir()
	id := uint32(testutil.UnprivilegedUID)
	if err := os.Chown(ws, int(id), int(id)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	vm, err := Boot(ctx, Config{Kernel: k, AllowEmulation: true, Log: testLog(t),
		Share: &Share{Workspace: ws, Hide: []string{"/etc/shadow"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	c := agent.NewClient(vm.Conn())
	defer c.Close()
	script := `pwd; echo hi > out; id -u; cat /etc/shadow | wc -c; echo x > /etc/hutch-test-write && echo wrote; ls /root | wc -l`
	p, err := c.Exec(ctx, agent.ExecRequest{Args: []string{"sh", "-c", script}, User: &agent.Credential{UID: id, GID: id}})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	done := make(chan struct{})
	go func() { io.Copy(&errb, p.Stderr); close(done) }()
	io.Copy(&out, p.Stdout)
	<-done
	st, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("exit %d, stdout %q, stderr %q", st.Code, out.String(), errb.String())
	fields := strings.Fields(out.String())
	if len(fields) < 3 || fields[0] != ws || fields[2] != "0" {
		t.Errorf("stdout %q: want the workspace %s, then the uid, then an empty /etc/shadow", out.String(), ws)
	}
	fi, err := os.Stat(filepath.Join(ws, "out"))
	if err != nil {
		t.Fatalf("the workspace's file is not on the host: %v", err)
	}
	if o := fi.Sys().(*syscall.Stat_t).Uid; o != id {
		t.Errorf("the workspace's file is owned by %d, want %d", o, id)
	}
	if _, err := os.Stat("/etc/hutch-test-write"); err == nil {
		os.Remove("/etc/hutch-test-write")
		t.Error("a write outside the workspace reached the host")
	}
}
