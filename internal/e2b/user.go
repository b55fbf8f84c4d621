package e2b

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
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
	// Through the agent, not a chown command: nothing of the request
	// (envVars such as PATH or LD_PRELOAD) takes part in the setup.
	if err := c.Chown(ctx, Workspace, userID, userID); err != nil {
		return fmt.Errorf("set up user %s: chown %s: %w", userName, Workspace, err)
	}
	return nil
}

// maxAccountFile bounds what appendLine reads of /etc/passwd or /etc/group
// (S7: the sandbox's files are untrusted, even when they are the host's
// copies).
const maxAccountFile = 1 << 20

// errTooLong is the error of a limitedBuffer that overflowed.
var errTooLong = errors.New("longer than the limit")

// limitedBuffer is a buffer that refuses to grow beyond max bytes.
type limitedBuffer struct {
	bytes.Buffer
	max int
}

// Write appends p, or fails if that would exceed the limit.
func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.max {
		return 0, fmt.Errorf("%d bytes: %w", b.max, errTooLong)
	}
	return b.Buffer.Write(p)
}

// appendLine makes line the entry of its name (the text before the first
// ':') and its id (the third field) in the file at path: the entries of
// the same name or id, such as a host user of uid 1000, are dropped from
// the sandbox's copy, so that the id is shown as E2B's user.
func appendLine(ctx context.Context, c *agent.Client, path, line string) error {
	buf := limitedBuffer{max: maxAccountFile}
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
