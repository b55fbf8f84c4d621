package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// runSandbox is a sandbox of hutch run's flags made ready to start: its
// policy (with hutch's own state and policy files closed to it), its root
// (an image's, or the host's), its egress proxy and report, its tier's
// runtime. hutch run starts one command in it; hutch mcp keeps sandboxes
// of it for an agent's session; hutch mcp wrap runs an MCP server in one.
type runSandbox struct {
	spec    policy.Spec
	imgRoot *sandbox.ImageRoot
	img     *image.Image
	imgUser image.User
	egress  *runEgress
	rt      sandbox.Runtime
	log     *slog.Logger
	stderr  io.Writer
	release func() // the image's layers, held while the sandbox runs
}

// prepare makes a sandbox of spec (rf.spec's, perhaps narrowed by the
// caller) ready to start; close releases what it holds. Its errors are
// hutch's own (exit code 125).
func (rf *runFlags) prepare(spec policy.Spec, stderr io.Writer) (*runSandbox, error) {
	s := &runSandbox{spec: spec, stderr: stderr, release: func() {}}
	stateDir := rf.stateDir
	if stateDir == "" {
		stateDir = image.DefaultStateDir()
	}
	if _, ok := spec.Image(); ok {
		var err error
		if s.imgRoot, s.img, s.imgUser, s.release, err = imageRoot(spec, stateDir, stderr); err != nil {
			return nil, err
		}
	}
	// Nor read or change hutch's own state: the state directory (--state-dir,
	// else HUTCH_STATE_DIR's, else the default one) holds the images whose
	// layers every sandbox of them runs, HUTCH_STATE_DIR perhaps a
	// daemon's; of a system directory named so, the store. Read-only too,
	// should --allow-read open it in a writable place.
	for _, d := range []string{stateDir, os.Getenv("HUTCH_STATE_DIR")} {
		if abs, err := filepath.Abs(d); d != "" && err == nil {
			if policy.SystemDir(abs) {
				abs = filepath.Join(abs, "images")
			}
			s.spec.Filesystem.DenyRead = append(s.spec.Filesystem.DenyRead, abs)
			s.spec.Filesystem.DenyWrite = append(s.spec.Filesystem.DenyWrite, abs)
		}
	}
	// The sandbox may never change the policy it runs under, even when the
	// file lies in its workspace (ESCAPES item 20).
	for _, f := range []string{rf.policyFile, rf.srtFile} {
		if abs, err := filepath.Abs(f); f != "" && err == nil {
			s.spec.Filesystem.DenyWrite = append(s.spec.Filesystem.DenyWrite, abs)
		}
	}
	s.log = slog.New(slog.DiscardHandler)
	if rf.debug {
		s.log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	var err error
	if s.egress, err = newEgress(s.spec, rf.givenMode == "none", rf.report, rf.reportTo, rf.upstreamCAs, stderr, s.log); err != nil {
		s.release()
		return nil, err
	}
	if s.rt, err = runtimeFor(s.spec.Tier, rf.runsc, rf.directFS); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// environ is the environment of command (the policy's, the image's, with
// the secrets' placeholders); an error when it, or command's arguments,
// would carry a secret's real value (S3).
func (s *runSandbox) environ(command []string) ([]string, error) {
	base := policy.BuildEnv(s.spec.Env, os.Environ())
	if s.img != nil {
		base = imageEnv(s.img, s.imgUser, s.spec, base)
	}
	return s.egress.sandboxEnv(base, command)
}

// config is the sandbox's configuration for its runtime, with environ as
// its environment; the caller adds the command and its stdio (Run) or
// the agent (Start).
func (s *runSandbox) config(environ []string) sandbox.Config {
	return sandbox.Config{
		Spec:     s.spec,
		Environ:  environ,
		CABundle: s.egress.caBundle,
		Wipe:     s.egress.secretValues(),
		Warn:     s.stderr,
		Log:      s.log,
		Proxy:    s.egress.sandboxProxy(),
		Image:    s.imgRoot,
	}
}

// finished reports, on stderr and in the report, what res says besides
// the command's exit: a timeout, running out of memory, files set aside,
// file accesses refused.
func (s *runSandbox) finished(res sandbox.Result) {
	if res.TimedOut {
		fmt.Fprintf(s.stderr, "hutch: timed out after %s; the sandbox was killed\n", s.spec.Resources.Timeout)
	}
	if res.OOMKilled {
		fmt.Fprintf(s.stderr, "hutch: the sandbox ran out of memory (limit %s)\n", policy.FormatSize(s.spec.Resources.MemoryBytes))
	}
	for _, line := range sandbox.SetAsideReport(res.SetAside) {
		fmt.Fprintln(s.stderr, line)
	}
	for _, sa := range res.SetAside {
		s.egress.rec.Note(setAsideRecord{Time: time.Now(), Sandbox: s.egress.id, Action: "set_aside", SetAside: sa})
	}
	for _, line := range sandbox.RefusalReport(res.Refused, res.RefusedMore) {
		fmt.Fprintln(s.stderr, line)
	}
	for _, r := range res.Refused {
		s.egress.rec.Note(fileRefusalRecord{Time: time.Now(), Sandbox: s.egress.id, Action: "blocked", Protocol: "file", FileRefusal: r})
	}
}

// close ends the egress proxy (writing the report and the summary of
// refusals) and releases the image's layers.
func (s *runSandbox) close() {
	s.egress.finish()
	s.release()
}
