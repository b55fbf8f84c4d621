package e2b

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/policy"
)

// A build runs in a sandbox of its tenant's, made as E2B's create makes
// one (the tenant's limits, the daemon's tier, E2B's default network):
// its commands are the tenant's, as hostile as any sandbox's, and reach
// nothing a sandbox of the tenant's does not. Its steps run through the
// sandbox's agent: RUN as a shell command (as the step's user, the
// template's env and working directory), COPY by writing the uploaded
// archive into the sandbox and unpacking it there (hostile archives are
// the sandbox's problem, never the host's), ENV, WORKDIR and USER as
// settings of the steps after them and of the sandboxes started from the
// template. The start command and ready command run last; then every
// process is killed and the sandbox's files become a snapshot of the
// tenant's, which the template's tags name. Nothing is cached: every
// build runs every step (E2B's skipCache and force are always true).

// Bounds of a build.
const (
	buildTimeout  = 30 * time.Minute // a build's whole run
	readyTimeout  = 5 * time.Minute  // a start command's readiness
	readyInterval = time.Second      // between two ready commands
	maxLogEntries = 10000            // log entries a build keeps
	maxLogLine    = 4096             // bytes of one log entry
)

// baseImage is E2B's base image (the SDK's fromBaseImage), which is
// hutch's base template here.
const baseImage = "e2bdev/base"

// buildJob is one build's run.
type buildJob struct {
	h                         *Handler
	tenant, tmpl, name, build string
	body                      startBody
	c                         *agent.Client // the build sandbox's agent
	sandbox                   string        // the build sandbox
	cfg                       runConfig     // what the steps set so far
	truncated                 bool          // the log overflowed (under reg.mu)
	stepName                  string        // E2B's name of the step running
	deadline                  time.Time
	shell                     []string
	resolveMu                 sync.Mutex
	cpuCount, memoryMB        int // the build's resources (withResources)
}

// stepError is a failed step: its message, E2B's where the SDK's tests
// check it.
type stepError struct {
	step string
	msg  string
}

func (e *stepError) Error() string { return e.msg }

// fail returns a stepError of the current step.
func (j *buildJob) fail(format string, args ...any) error {
	return &stepError{step: j.stepName, msg: fmt.Sprintf(format, args...)}
}

// log appends an entry to the build's logs (bounded).
func (j *buildJob) log(level, msg string) {
	if len(msg) > maxLogLine {
		msg = msg[:maxLogLine] + "…"
	}
	e := logJSON{Timestamp: time.Now().UTC(), Level: level, Message: msg, Step: j.stepName}
	j.h.reg.mu.Lock()
	defer j.h.reg.mu.Unlock()
	bd := j.buildLocked()
	if bd == nil {
		return
	}
	switch {
	case len(bd.logs) < maxLogEntries-1:
		bd.logs = append(bd.logs, e)
	case !j.truncated:
		j.truncated = true
		e.Level, e.Message = "warn", fmt.Sprintf("the build's log holds %d entries, the most kept: later output is dropped", maxLogEntries)
		bd.logs = append(bd.logs, e)
	}
}

// buildLocked is the job's build, nil once its template is deleted.
// Under reg.mu.
func (j *buildJob) buildLocked() *build {
	t := j.h.reg.byID[j.tmpl]
	if t == nil {
		return nil
	}
	return t.buildOf(j.build)
}

// run runs the build and records how it ended.
func (j *buildJob) run(ctx context.Context) {
	j.deadline, _ = ctx.Deadline()
	j.cfg.Env = map[string]string{}
	j.cfg.Workdir, j.cfg.User = Workspace, userName
	j.stepName = "base"
	j.log("info", fmt.Sprintf("Building template %s (%s), build %s", j.name, j.tmpl, j.build))
	snap, err := j.steps(ctx)
	if j.sandbox != "" {
		if derr := j.h.m.Destroy(context.WithoutCancel(ctx), j.tenant, j.sandbox); derr != nil && !errors.Is(derr, daemon.ErrNotFound) {
			j.h.log.Warn("destroy a template build's sandbox", "sandbox", j.sandbox, "err", derr)
		}
	}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		var se *stepError
		if !errors.As(err, &se) {
			se = &stepError{step: j.stepName, msg: err.Error()}
			if errors.Is(err, context.DeadlineExceeded) {
				se.msg = fmt.Sprintf("the build ran longer than the %v allowed, and was stopped", buildTimeout)
			} else if errors.Is(err, context.Canceled) {
				se.msg = "the build was cancelled (its template was deleted, or the server stops)"
			}
		}
		j.log("error", se.msg)
		j.h.reg.mu.Lock()
		defer j.h.reg.mu.Unlock()
		if bd := j.buildLocked(); bd != nil {
			var last []logJSON
			for _, e := range bd.logs {
				if e.Level == "error" {
					last = append(last, e)
				}
			}
			bd.Status, bd.Updated, bd.Finished, bd.cancel = statusError, time.Now(), time.Now(), nil
			bd.Reason = &reasonJSON{Message: se.msg, Step: se.step, LogEntries: last}
			j.h.saveLogs(bd)
			j.h.save()
		}
		j.h.dropSnapshot(j.tenant, snap)
		return
	}
	j.stepName = "finalize"
	j.log("info", fmt.Sprintf("Build finished: template %s (%s), build %s", j.name, j.tmpl, j.build))
	j.h.reg.mu.Lock()
	defer j.h.reg.mu.Unlock()
	t := j.h.reg.byID[j.tmpl]
	bd := j.buildLocked()
	if bd == nil {
		j.h.dropSnapshot(j.tenant, snap)
		return
	}
	now := time.Now()
	bd.Status, bd.Updated, bd.Finished, bd.Snapshot, bd.Run, bd.cancel = statusReady, now, now, snap, j.cfg, nil
	for _, tg := range bd.Want {
		t.Tags[tg], t.TagTime[tg] = bd.ID, now
	}
	t.Updated = now
	j.h.release(t)
	j.h.saveLogs(bd)
	j.h.save()
}

// release deletes the snapshots of t's ready builds that no tag names
// any more: no sandbox starts from them (those that did run on). Under
// reg.mu.
func (h *Handler) release(t *tmpl) {
	tagged := map[string]bool{}
	for _, id := range t.Tags {
		tagged[id] = true
	}
	for _, b := range t.Builds {
		if b.Snapshot != "" && !tagged[b.ID] {
			h.dropSnapshot(t.Tenant, b.Snapshot)
			b.Snapshot = ""
		}
	}
}

// steps makes the build's sandbox, runs its steps and snapshots it,
// returning the snapshot's id.
func (j *buildJob) steps(ctx context.Context) (string, error) {
	req, err := j.base(ctx)
	if err != nil {
		return "", err
	}
	// The build's files are kept as a snapshot: a tier without them is
	// refused before any step runs.
	if err := j.h.m.(daemon.Snapshotter).SnapshotsRefused(req.Policy); err != nil {
		return "", j.fail("a template's files are kept as a snapshot of the build's sandbox: %v", err)
	}
	info, err := j.h.m.Create(ctx, j.tenant, req)
	if errors.Is(err, daemon.ErrInvalid) && strings.Contains(err.Error(), "timeout") {
		// A daemon whose sandboxes live shorter: the build has their
		// lifetime at most.
		req.Timeout = 0
		info, err = j.h.m.Create(ctx, j.tenant, req)
	}
	if err != nil {
		if ref, ok := req.Policy.Image(); ok {
			return "", j.fail("base image %s: %v (a build pulls no image: the server's operator adds it to the daemon's store)", ref, err)
		}
		return "", j.fail("start the build's sandbox: %v", err)
	}
	j.sandbox = info.ID
	// A build stopped (its time up, its template deleted, the server
	// stopping) ends its sandbox at once, and with it the command that
	// runs there.
	defer context.AfterFunc(ctx, func() { _ = j.h.m.Destroy(context.WithoutCancel(ctx), j.tenant, info.ID) })()
	j.log("info", "Build sandbox "+info.ID+" started")
	if err := j.h.setup(ctx, j.tenant, info.ID); err != nil {
		return "", j.fail("set up the build's sandbox: %v", err)
	}
	if j.c, err = j.h.m.Agent(ctx, j.tenant, info.ID); err != nil {
		return "", err
	}
	j.shell = []string{"/bin/sh", "-c"}
	if _, err := j.c.Stat(ctx, "/bin/bash"); err == nil {
		j.shell = []string{"/bin/bash", "-c"}
	}
	for i, s := range j.body.Steps {
		j.stepName = strconv.Itoa(i + 1)
		j.log("info", fmt.Sprintf("[%d/%d] %s %s", i+1, len(j.body.Steps), s.Type, strings.Join(s.Args, " ")))
		if err := j.step(ctx, s); err != nil {
			return "", err
		}
	}
	j.stepName = "finalize"
	if j.body.StartCmd != "" {
		j.cfg.StartCmd = j.body.StartCmd
	}
	if j.body.ReadyCmd != "" {
		j.cfg.ReadyCmd = j.body.ReadyCmd
	}
	if j.cfg.StartCmd != "" || j.cfg.ReadyCmd != "" {
		j.log("info", "Running the start command and waiting for its ready command")
		if err := startAndWait(ctx, j.c, j.cfg, j.userCred, j.log); err != nil {
			return "", j.fail("%v", err)
		}
	}
	// Only files go into the template: its start command runs again in
	// every sandbox started from it.
	if err := j.c.KillAll(ctx); err != nil {
		return "", j.fail("stop the build's processes: %v", err)
	}
	sn, err := j.h.m.(daemon.Snapshotter).SnapshotNamed(ctx, j.tenant, info.ID, "")
	if err != nil {
		return "", j.fail("keep the build's files: %v", err)
	}
	j.log("info", fmt.Sprintf("Template files kept: %d bytes", sn.Size))
	return sn.ID, nil
}

// base is the request of the build's sandbox: from the template or image
// the build names.
func (j *buildJob) base(ctx context.Context) (daemon.CreateRequest, error) {
	h := j.h
	body := CreateBody{TemplateID: Template}
	from, snapshot, image := j.body.FromTemplate, "", ""
	switch {
	case from != "" && h.daemonTemplate(from):
		body.TemplateID = from
	case from != "":
		tr, ok, err := h.resolveTemplate(j.tenant, from)
		if err != nil {
			return daemon.CreateRequest{}, j.fail("base template %s: %v", from, err)
		}
		if ok {
			snapshot, j.cfg = tr.snapshot, cloneRun(tr.run)
			break
		}
		sid, err := h.snapshotTemplate(ctx, j.tenant, from)
		if err != nil {
			return daemon.CreateRequest{}, j.fail("base template %s: %v", from, err)
		}
		if sid == "" {
			return daemon.CreateRequest{}, j.fail("base template %s: not found (neither this server's nor one of the tenant's templates or snapshots)", from)
		}
		snapshot = sid
	case j.body.FromImage == "" || isBaseImage(j.body.FromImage):
	default:
		if _, err := imageNormalize(j.body.FromImage); err != nil {
			return daemon.CreateRequest{}, j.fail("base image %s: %v", j.body.FromImage, err)
		}
		image = j.body.FromImage
	}
	req, _, err := createRequest(body, !h.noInternet, h.m.CheckTenantRule, h.templates, nil)
	if err != nil {
		return req, j.fail("base template %s: %v", body.TemplateID, err)
	}
	if snapshot != "" {
		req.Snapshot, req.Policy.Root = snapshot, ""
	}
	if image != "" {
		// The daemon starts only images of its store that it allows
		// (hutch serve --allow-image); a build pulls nothing.
		req.Policy.Root = policy.ImagePrefix + image
	}
	withResources(&req.Policy.Resources, j.cpuCount, j.memoryMB)
	req.Timeout = buildTimeout + time.Minute
	req.Labels = map[string]string{"e2b.templateBuild": j.tmpl + "/" + j.build}
	return req, nil
}

// isBaseImage reports whether ref is E2B's base image.
func isBaseImage(ref string) bool {
	n, err := imageNormalize(ref)
	if err != nil {
		return false
	}
	base, _ := imageNormalize(baseImage)
	return n == base || strings.TrimSuffix(n, ":latest") == strings.TrimSuffix(base, ":latest")
}

// imageNormalize is image.Normalize.
var imageNormalize = image.Normalize

// cloneRun copies c.
func cloneRun(c runConfig) runConfig {
	c.Env = maps.Clone(c.Env)
	if c.Env == nil {
		c.Env = map[string]string{}
	}
	return c
}

// step runs one step.
func (j *buildJob) step(ctx context.Context, s stepJSON) error {
	switch s.Type {
	case "ENV":
		for i := 0; i+1 < len(s.Args); i += 2 {
			j.cfg.Env[s.Args[i]] = s.Args[i+1]
		}
		if err := daemon.CheckEnv("ENV", j.cfg.Env); err != nil {
			return j.fail("%v", err)
		}
		return nil
	case "USER":
		if _, err := j.resolveUser(ctx, s.Args[0]); err != nil {
			return j.fail("set user: %v", err)
		}
		j.cfg.User = s.Args[0]
		return nil
	case "WORKDIR":
		dir := j.abs(s.Args[0])
		if _, err := j.c.Stat(ctx, dir); errors.Is(err, os.ErrNotExist) {
			if err := j.c.Mkdir(ctx, dir, true); err != nil {
				return j.fail("set workdir %s: %v", dir, err)
			}
			u, err := j.resolveUser(ctx, j.cfg.User)
			if err != nil {
				return j.fail("set workdir %s: %v", dir, err)
			}
			if err := j.c.Chown(ctx, dir, uint32(u.UID), uint32(u.GID)); err != nil {
				return j.fail("set workdir %s: %v", dir, err)
			}
		} else if err != nil {
			return j.fail("set workdir %s: %v", dir, err)
		}
		j.cfg.Workdir = dir
		return nil
	case "RUN":
		user := j.cfg.User
		if len(s.Args) > 1 && s.Args[1] != "" {
			user = s.Args[1]
		}
		return j.runCmd(ctx, s.Args[0], user)
	case "COPY":
		return j.copy(ctx, s)
	}
	return j.fail("step type %q: unknown", s.Type)
}

// abs is p against the working directory.
func (j *buildJob) abs(p string) string {
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	return path.Join(j.cfg.Workdir, p)
}

// resolveUser resolves a user name (or uid) with the sandbox's own
// /etc/passwd and /etc/group.
func (j *buildJob) resolveUser(ctx context.Context, name string) (image.User, error) {
	j.resolveMu.Lock()
	defer j.resolveMu.Unlock()
	return resolveIn(ctx, j.c, name)
}

// resolveIn resolves a user name (or uid) with c's sandbox's /etc/passwd
// and /etc/group.
func resolveIn(ctx context.Context, c *agent.Client, name string) (image.User, error) {
	if strings.Contains(name, ":") {
		return image.User{}, fmt.Errorf("user %q: a user, not user:group", name)
	}
	return image.ResolveUser(name, func(file string) ([]byte, error) {
		buf := limitedBuffer{max: maxAccountFile}
		if _, err := c.ReadFile(ctx, "/"+file, &buf); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	})
}

// userCred is the credential and environment of a command run as name.
func (j *buildJob) userCred(ctx context.Context, name string) (*agent.Credential, []string, error) {
	u, err := j.resolveUser(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	return credOf(u)
}

// credOf is u's credential and its HOME, USER and LOGNAME.
func credOf(u image.User) (*agent.Credential, []string, error) {
	name := u.Name
	if name == "" {
		name = strconv.Itoa(u.UID)
	}
	return &agent.Credential{UID: uint32(u.UID), GID: uint32(u.GID)}, []string{"HOME=" + u.Home, "USER=" + name, "LOGNAME=" + name}, nil
}

// remaining is the time left of the build.
func (j *buildJob) remaining() time.Duration {
	if j.deadline.IsZero() {
		return buildTimeout
	}
	return max(time.Until(j.deadline), time.Second)
}

// envList is env as NAME=value entries.
func envList(env map[string]string, more ...string) []string {
	out := make([]string, 0, len(env)+len(more))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return append(out, more...)
}

// runCmd runs a RUN step's command as user, its output logged.
func (j *buildJob) runCmd(ctx context.Context, cmd, user string) error {
	cred, env, err := j.userCred(ctx, user)
	if err != nil {
		// E2B's words, which its SDK's tests check.
		return j.fail("failed to run command '%s': command failed: unauthenticated: invalid username: '%s'", cmd, user)
	}
	st, err := j.exec(ctx, agent.ExecRequest{Args: append(append([]string(nil), j.shell...), cmd), Env: envList(j.cfg.Env, env...),
		Dir: j.cfg.Workdir, User: cred, Timeout: j.remaining()})
	if err != nil {
		return j.fail("failed to run command '%s': %v", cmd, err)
	}
	if st.TimedOut {
		return j.fail("failed to run command '%s': the build ran longer than the %v allowed", cmd, buildTimeout)
	}
	if st.Code != 0 {
		return j.fail("failed to run command '%s': command failed: exit status %d", cmd, st.Code)
	}
	return nil
}

// exec runs a command to its end, its output logged line by line
// (stdout info, stderr error).
func (j *buildJob) exec(ctx context.Context, r agent.ExecRequest) (agent.ExitStatus, error) {
	return execLogged(ctx, j.c, r, j.log)
}

// execLogged runs a command to its end, its output given to log line by
// line (stdout info, stderr error).
func execLogged(ctx context.Context, c *agent.Client, r agent.ExecRequest, log func(level, msg string)) (agent.ExitStatus, error) {
	p, err := c.Exec(ctx, r)
	if err != nil {
		return agent.ExitStatus{}, err
	}
	var wg sync.WaitGroup
	for level, out := range map[string]io.Reader{"info": p.Stdout, "error": p.Stderr} {
		wg.Go(func() { logLines(out, level, log) })
	}
	read := make(chan struct{})
	go func() { wg.Wait(); close(read) }()
	st, err := p.Wait()
	if err != nil {
		return st, err
	}
	// The output written before the exit is sent before it: it is read
	// to its end, or to where the readers wait for more that a process
	// left in the background may write.
	for {
		select {
		case <-read:
			return st, nil
		case <-time.After(50 * time.Millisecond):
			if !p.OutputPending() {
				return st, nil
			}
		}
	}
}

// logLines gives each line of r to log, and drains r to its end.
func logLines(r io.Reader, level string, log func(level, msg string)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLogLine)
	for sc.Scan() {
		log(level, sc.Text())
	}
	// A line longer than the buffer ends the scan: drain the rest.
	_, _ = io.Copy(io.Discard, r)
}

// copyScript unpacks a COPY step's archive in the sandbox and copies what
// its source names to its destination as Docker's COPY does: several
// sources (a source with wildcards), a directory, a destination ending in
// '/' or an existing directory copy into the destination; a single file
// is copied to it.
const copyScript = `set -e
t=$(mktemp -d)
trap 'rm -rf "$t" "$HUTCH_TAR"' EXIT
tar -xf "$HUTCH_TAR" -C "$t" --no-same-owner
chown -R -h "$HUTCH_OWNER" "$t"
cd "$t"
IFS=
set -- $HUTCH_SRC
if [ ! -e "$1" ] && [ ! -L "$1" ]; then echo "COPY: no file of the upload matches $HUTCH_SRC" >&2; exit 1; fi
if [ -n "$HUTCH_MODE" ]; then find "$@" ! -type d ! -type l -exec chmod "$HUTCH_MODE" {} +; fi
made=
if [ $# -gt 1 ] || [ "$HUTCH_DIRDEST" = 1 ] || { [ -d "$1" ] && [ ! -L "$1" ]; } || [ -d "$HUTCH_DEST" ]; then
  [ -e "$HUTCH_DEST" ] || made=1
  mkdir -p "$HUTCH_DEST"
  for s in "$@"; do
    if [ -d "$s" ] && [ ! -L "$s" ]; then cp -a "$s"/. "$HUTCH_DEST"/; else cp -a "$s" "$HUTCH_DEST"/; fi
  done
  if [ -n "$made" ]; then chown "$HUTCH_OWNER" "$HUTCH_DEST"; fi
else
  mkdir -p "$(dirname "$HUTCH_DEST")"
  cp -a "$1" "$HUTCH_DEST"
fi
`

// copy runs a COPY step: args source, destination, user, mode.
func (j *buildJob) copy(ctx context.Context, s stepJSON) error {
	src, dest := s.Args[0], s.Args[1]
	user, mode := j.cfg.User, ""
	if len(s.Args) > 2 && s.Args[2] != "" {
		user = s.Args[2]
	}
	if len(s.Args) > 3 {
		mode = s.Args[3]
	}
	if mode != "" && strings.Trim(mode, "01234567") != "" {
		return j.fail("COPY %s: mode %q: want octal digits", src, mode)
	}
	u, err := j.resolveUser(ctx, user)
	if err != nil {
		return j.fail("COPY %s: invalid username: '%s'", src, user)
	}
	f, err := os.Open(j.h.uploadPath(j.tmpl, s.FilesHash))
	if err != nil {
		return j.fail("COPY %s: its upload: %v", src, err)
	}
	defer f.Close()
	tarPath := "/tmp/.hutch-copy-" + randomHex(8)
	if _, err := j.c.WriteFile(ctx, tarPath, f, 0o600); err != nil {
		return j.fail("COPY %s: put its upload in the sandbox: %v", src, err)
	}
	// A destination ending in '/', or of a source with wildcards (which
	// may match one file or many), is a directory.
	dirDest := "0"
	if strings.HasSuffix(dest, "/") || strings.ContainsAny(src, "*?[") {
		dirDest = "1"
	}
	env := []string{"HUTCH_TAR=" + tarPath, "HUTCH_SRC=" + src, "HUTCH_DEST=" + j.abs(dest), "HUTCH_DIRDEST=" + dirDest,
		"HUTCH_OWNER=" + strconv.Itoa(u.UID) + ":" + strconv.Itoa(u.GID), "HUTCH_MODE=" + mode}
	st, err := j.exec(ctx, agent.ExecRequest{Args: []string{"/bin/sh", "-c", copyScript}, Env: env, Dir: "/",
		User: &agent.Credential{}, Timeout: j.remaining(), Own: true})
	if err != nil {
		return j.fail("COPY %s: %v", src, err)
	}
	if st.Code != 0 {
		return j.fail("COPY %s %s: failed (exit status %d)", src, dest, st.Code)
	}
	return nil
}

// startAndWait starts run's start command in the background (as its
// user, in its working directory) and runs its ready command until it
// succeeds, for readyTimeout at most. cred resolves a user's credential;
// log takes the commands' output.
func startAndWait(ctx context.Context, c *agent.Client, run runConfig,
	cred func(context.Context, string) (*agent.Credential, []string, error), log func(level, msg string)) error {
	user := run.User
	if user == "" {
		user = userName
	}
	dir := run.Workdir
	if dir == "" {
		dir = Workspace
	}
	uc, env, err := cred(ctx, user)
	if err != nil {
		return fmt.Errorf("start command: invalid username: '%s'", user)
	}
	env = envList(run.Env, env...)
	shell := []string{"/bin/sh", "-c"}
	if _, err := c.Stat(ctx, "/bin/bash"); err == nil {
		shell = []string{"/bin/bash", "-c"}
	}
	if run.StartCmd != "" {
		p, err := c.Exec(ctx, agent.ExecRequest{Args: append(append([]string(nil), shell...), run.StartCmd), Env: env, Dir: dir, User: uc})
		if err != nil {
			return fmt.Errorf("start command %q: %v", run.StartCmd, err)
		}
		// Its output is drained (and logged) for as long as it runs.
		go logLines(p.Stdout, "info", log)
		go logLines(p.Stderr, "error", log)
		go func() { _, _ = p.Wait() }()
		if run.ReadyCmd == "" {
			return nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		dl, _ := ctx.Deadline()
		st, err := execLogged(ctx, c, agent.ExecRequest{Args: append(append([]string(nil), shell...), run.ReadyCmd), Env: env, Dir: dir, User: uc,
			Timeout: max(time.Until(dl), time.Second)}, func(string, string) {})
		if err == nil && st.Code == 0 && !st.TimedOut {
			return nil
		}
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("ready command %q: %v", run.ReadyCmd, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ready command %q did not succeed within %v", run.ReadyCmd, readyTimeout)
		case <-time.After(readyInterval):
		}
	}
}

// startTemplate runs the start and ready commands of the template tenant's
// new sandbox id was started from, if it has them.
func (h *Handler) startTemplate(ctx context.Context, tenant, id string, run runConfig) error {
	if run.StartCmd == "" && run.ReadyCmd == "" {
		return nil
	}
	c, err := h.m.Agent(ctx, tenant, id)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	cred := func(ctx context.Context, name string) (*agent.Credential, []string, error) {
		mu.Lock()
		defer mu.Unlock()
		u, err := resolveIn(ctx, c, name)
		if err != nil {
			return nil, nil, err
		}
		return credOf(u)
	}
	err = startAndWait(ctx, c, run, cred, func(string, string) {})
	if err != nil {
		return fmt.Errorf("the template's %w: %w", err, daemon.ErrUnavailable)
	}
	return nil
}
