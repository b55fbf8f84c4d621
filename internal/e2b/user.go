package e2b

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
)

// The user of E2B's templates, which E2B's SDKs run commands as by default.
const (
	userName   = "user"
	userID     = 1000
	passwdLine = "user:x:1000:1000::/home/user:/bin/bash"
	groupLine  = "user:x:1000:"
)

// setupTimeout bounds the setup of a new sandbox's user.
const setupTimeout = 30 * time.Second

// setupUser gives tenant's new sandbox id the user "user" (uid and gid
// 1000, home Workspace): entries in /etc/passwd and /etc/group (the
// sandbox's own copies, in its writable root) and the home owned by it.
func (h *Handler) setupUser(ctx context.Context, tenant, id string) error {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	c, err := h.m.Agent(ctx, tenant, id)
	if err != nil {
		return fmt.Errorf("set up user %s: %w", userName, err)
	}
	if err := appendLine(ctx, c, "/etc/passwd", passwdLine); err != nil {
		return fmt.Errorf("set up user %s: %w", userName, err)
	}
	if err := appendLine(ctx, c, "/etc/group", groupLine); err != nil {
		return fmt.Errorf("set up user %s: %w", userName, err)
	}
	owner := fmt.Sprintf("%d:%d", userID, userID)
	if err := run(ctx, c, "chown", owner, Workspace); err != nil {
		return fmt.Errorf("set up user %s: %w", userName, err)
	}
	return nil
}

// appendLine makes line the entry of its name (the text before the first
// ':') and its id (the third field) in the file at path: the entries of
// the same name or id, such as a host user of uid 1000, are dropped from
// the sandbox's copy, so that the id is shown as E2B's user.
func appendLine(ctx context.Context, c *agent.Client, path, line string) error {
	var buf bytes.Buffer
	if _, err := c.ReadFile(ctx, path, &buf); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	want := strings.Split(line, ":")
	var out strings.Builder
	for l := range strings.SplitSeq(strings.TrimSuffix(buf.String(), "\n"), "\n") {
		f := strings.Split(l, ":")
		if l == "" || f[0] == want[0] || (len(f) > 2 && f[2] == want[2]) {
			continue
		}
		out.WriteString(l + "\n")
	}
	out.WriteString(line + "\n")
	if _, err := c.WriteFile(ctx, path, strings.NewReader(out.String()), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// run runs a command in the sandbox to its end; a non-zero exit is an
// error carrying its stderr.
func run(ctx context.Context, c *agent.Client, args ...string) error {
	p, err := c.Exec(ctx, agent.ExecRequest{Args: args, Timeout: setupTimeout})
	if err != nil {
		return fmt.Errorf("run %s: %w", args[0], err)
	}
	var stderr bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _, _ = io.Copy(io.Discard, p.Stdout) }()
	go func() {
		defer wg.Done()
		_, _ = io.Copy(&stderr, io.LimitReader(p.Stderr, 4096))
		_, _ = io.Copy(io.Discard, p.Stderr)
	}()
	st, err := p.Wait()
	wg.Wait()
	if err != nil {
		return fmt.Errorf("run %s: %w", args[0], err)
	}
	if st.Code != 0 {
		return fmt.Errorf("run %s: exit code %d: %s", strings.Join(args, " "), st.Code, strings.TrimSpace(stderr.String()))
	}
	return nil
}
