package runner

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/hutch-sandbox/hutch/internal/approve"
	"github.com/hutch-sandbox/hutch/internal/changes"
	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/secrets"
)

// Sandbox is a sandbox of hutch run's flags made ready to start: its
// policy (with hutch's own state and policy files closed to it), its root
// (an image's, or the host's), its egress proxy and report, its tier's
// runtime. hutch run starts one command in it; hutch mcp keeps sandboxes
// of it for an agent's session; hutch mcp wrap runs an MCP server in one.
type Sandbox struct {
	// Spec is the sandbox's policy.
	Spec policy.Spec
	// Runtime is its tier's runtime, which runs or starts it.
	Runtime sandbox.Runtime
	imgRoot *sandbox.ImageRoot
	img     *image.Image
	imgUser image.User
	egress  *runEgress
	log     *slog.Logger
	stderr  io.Writer
	release func() // the image's layers, held while the sandbox runs
	closers []func() error
	// Gate is the sandbox's approval gate: nil when its policy has no
	// approvals and no network.on_unknown.
	Gate *approve.Gate
}

// Prepare makes a sandbox of spec (rf.Spec's, perhaps narrowed by the
// caller) ready to start; Close releases what it holds. Its errors are
// hutch's own (exit code 125).
func (rf *Flags) Prepare(spec policy.Spec, stderr io.Writer) (*Sandbox, error) {
	s := &Sandbox{Spec: spec, stderr: stderr, release: func() {}}
	stateDir := rf.StateDir
	if stateDir == "" {
		stateDir = image.DefaultStateDir()
	}
	if _, ok := spec.Image(); ok {
		if spec.Tier == policy.TierMicroVM {
			// Before any pull.
			return nil, fmt.Errorf("tier %q: an image is not yet supported under hutch run (hutch serve starts microVMs of images: hutch create --tier microvm --image)", policy.TierMicroVM)
		}
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
	// The change sets of review mode too, wherever $XDG_STATE_HOME puts
	// them: what a sandbox could write there, a person would apply as
	// reviewed (and their bases decide the conflicts).
	changeSets := ""
	if st, err := changes.DefaultStore(); err == nil {
		changeSets = st.Dir()
	}
	for _, d := range []string{stateDir, os.Getenv("HUTCH_STATE_DIR"), changeSets} {
		if abs, err := filepath.Abs(d); d != "" && err == nil {
			if policy.SystemDir(abs) {
				abs = filepath.Join(abs, "images")
			}
			s.Spec.Filesystem.DenyRead = append(s.Spec.Filesystem.DenyRead, abs)
			s.Spec.Filesystem.DenyWrite = append(s.Spec.Filesystem.DenyWrite, abs)
		}
	}
	// The sandbox may never change the policy it runs under, even when the
	// file lies in its workspace (ESCAPES item 20).
	for _, f := range []string{rf.policyFile, rf.srtFile} {
		if abs, err := filepath.Abs(f); f != "" && err == nil {
			s.Spec.Filesystem.DenyWrite = append(s.Spec.Filesystem.DenyWrite, abs)
		}
	}
	s.log = slog.New(slog.DiscardHandler)
	if rf.Debug {
		s.log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	var err error
	if s.egress, err = newEgress(s.Spec, rf.givenMode == "none", rf.Report, rf.ReportTo, rf.UpstreamCAs, stderr, s.log); err != nil {
		s.release()
		return nil, err
	}
	if err = rf.setupApprovals(s); err != nil {
		s.Close()
		return nil, err
	}
	if s.Runtime, err = rf.RuntimeFor(s.Spec.Tier); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Environ is the environment of command (the policy's, the image's, with
// the secrets' placeholders); an error when it, or command's arguments,
// would carry a secret's real value (S3).
func (s *Sandbox) Environ(command []string) ([]string, error) {
	base := policy.BuildEnv(s.Spec.Env, os.Environ())
	if s.img != nil {
		base = imageEnv(s.img, s.imgUser, s.Spec, base)
	}
	return s.egress.sandboxEnv(base, command)
}

// Config is the sandbox's configuration for its runtime, with environ as
// its environment; the caller adds the command and its stdio (Run) or
// the agent (Start).
func (s *Sandbox) Config(environ []string) sandbox.Config {
	return sandbox.Config{
		Spec:     s.Spec,
		Environ:  environ,
		CABundle: s.egress.caBundle,
		Wipe:     s.egress.secretValues(),
		Warn:     s.stderr,
		Log:      s.log,
		Proxy:    s.egress.sandboxProxy(),
		Image:    s.imgRoot,
	}
}

// Finished reports, on stderr and in the report, what res says besides
// the command's exit: a timeout, running out of memory, files set aside,
// file accesses refused.
func (s *Sandbox) Finished(res sandbox.Result) {
	if res.TimedOut {
		fmt.Fprintf(s.stderr, "hutch: timed out after %s; the sandbox was killed\n", s.Spec.Resources.Timeout)
	}
	if res.OOMKilled {
		fmt.Fprintf(s.stderr, "hutch: the sandbox ran out of memory (limit %s)\n", policy.FormatSize(s.Spec.Resources.MemoryBytes))
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

// Close ends the egress proxy (writing the report and the summary of
// refusals) and releases the image's layers.
func (s *Sandbox) Close() {
	s.egress.finish()
	s.release()
	for _, c := range s.closers {
		_ = c()
	}
}

// ID names the sandbox in the report's lines and in events.
func (s *Sandbox) ID() string { return s.egress.id }

// Secrets are the secrets the sandbox gets placeholders for.
func (s *Sandbox) Secrets() []*secrets.Secret { return s.egress.secrets }

// Note writes a line of the caller's own, v as JSON, to the report.
func (s *Sandbox) Note(v any) { s.egress.rec.Note(v) }

// UseImageCommand is the command of a sandbox from an image when none is
// given: the image's own (its entrypoint and command), which then starts
// in the image's working directory rather than in the workspace; nil when
// the sandbox is not an image's.
func (s *Sandbox) UseImageCommand() []string {
	if s.img == nil {
		return nil
	}
	if wd := s.img.Config.WorkingDir; wd != "" {
		s.imgRoot.Dir = filepath.Join("/", wd)
	}
	return imageCommand(s.img)
}

// setAsideRecord is the --report line of something hutch set aside.
type setAsideRecord struct {
	Time    time.Time `json:"time"`
	Sandbox string    `json:"sandbox"`
	Action  string    `json:"action"` // "set_aside"
	sandbox.SetAside
}

// fileRefusalRecord is a line of the report for what the sandbox was
// refused at a path hutch hid or protected (counted: one line a path and
// kind of access).
type fileRefusalRecord struct {
	Time     time.Time `json:"time"`
	Sandbox  string    `json:"sandbox"`
	Action   string    `json:"action"`   // "blocked"
	Protocol string    `json:"protocol"` // "file"
	sandbox.FileRefusal
}
