package runner

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/hutch-sandbox/hutch/internal/egress"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/secrets"
)

// runEgress is the network side of one `hutch run`: the egress proxy in
// proxy mode, and the report of what it refused and let through.
type runEgress struct {
	proxy   *egress.Proxy
	rec     *egress.Recorder
	report  *os.File
	stderr  io.Writer
	secrets []*secrets.Secret
	// caBundle is the trust bundle for the sandbox (the system's roots and
	// the sandbox's CA) when it has secrets; its directory is removed by
	// finish.
	caBundle string
	// id names the sandbox in the report's lines.
	id string
}

// newEgress sets up the proxy for spec's network policy and opens the
// report file (before the sandbox starts, so a bad path fails early), or
// writes the report to reportTo when it is not nil (hutch mcp's
// sandboxes share one report). explicitNone says that the user asked for
// network mode "none" (a flag or the policy file), which allowing a host
// then has to change too.
func newEgress(spec policy.Spec, explicitNone bool, report string, reportTo io.Writer, upstreamCAs []string, stderr io.Writer, log *slog.Logger) (*runEgress, error) {
	e := &runEgress{stderr: stderr}
	var w io.Writer
	switch {
	case reportTo != nil:
		w = reportTo
	case report != "":
		f, err := os.OpenFile(report, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return nil, fmt.Errorf("--report: %w", err)
		}
		e.report, w = f, f
	}
	e.rec = egress.NewRecorder(w)
	id := newRunID()
	e.id = id
	switch spec.Network.Mode {
	case "host":
		fmt.Fprintln(stderr, "hutch: warning: --net host: the sandbox shares the host's network; no egress policy applies")
		return e, nil
	case "none":
		// The sandbox has no network, but hutch answers on its loopback:
		// a proxy that refuses every destination and a DNS server that
		// knows no name, so that clients fail at once, and hutch can say
		// where they tried to go.
		rules, err := egress.NewRules(egress.Config{Offline: true, OperatorRules: true})
		if err != nil {
			e.finish()
			return nil, fmt.Errorf("network policy: %w", err)
		}
		e.proxy = &egress.Proxy{Rules: rules, Sandbox: id, Record: e.rec.Record, Log: log, Hostname: sandbox.Hostname}
		if explicitNone {
			// Allowing a host then takes the mode too.
			e.rec.SetFixPrefix("--net proxy")
		}
		return e, nil
	case "proxy":
	default:
		return e, nil
	}
	cfg, err := egress.ConfigFromPolicy(spec.Network)
	if err != nil {
		e.finish()
		return nil, err
	}
	if e.secrets, err = egress.LoadSecrets(spec.Secrets, nil); err != nil {
		e.finish()
		return nil, err
	}
	cfg.Secrets = e.secrets
	if cfg.Headers, err = egress.HeaderRules(spec.Network.Headers, e.secrets); err != nil {
		e.finish()
		return nil, fmt.Errorf("network policy: %w", err)
	}
	// hutch run's user is the operator: an IP-literal rule may open a
	// private or loopback address on purpose.
	cfg.OperatorRules = true
	rules, err := egress.NewRules(cfg)
	if err != nil {
		e.finish()
		return nil, fmt.Errorf("network policy: %w", err)
	}
	e.proxy = &egress.Proxy{Rules: rules, Sandbox: id, Record: e.rec.Record, Log: log, Hostname: sandbox.Hostname}
	if len(e.secrets) > 0 || len(cfg.Headers) > 0 {
		if err := e.setupTLS(id, upstreamCAs); err != nil {
			e.finish()
			return nil, err
		}
	}
	return e, nil
}

// setupTLS makes the sandbox's CA, the proxy's roots for the secrets'
// hosts, and the trust bundle the sandbox gets.
func (e *runEgress) setupTLS(id string, upstreamCAs []string) error {
	roots, err := upstreamRoots(upstreamCAs)
	if err != nil {
		return err
	}
	bundle, err := e.proxy.Intercept(id, roots, sandbox.SystemRootsPEM())
	if err != nil {
		return err
	}
	// The bundle lives in a directory anyone may enter: the sandbox's
	// identity opens it when it binds the file into its view.
	dir, err := os.MkdirTemp("", "hutch-ca-")
	if err != nil {
		return fmt.Errorf("trust bundle: %w", err)
	}
	e.caBundle = filepath.Join(dir, "ca-certificates.crt")
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("trust bundle: %w", err)
	}
	if err := os.WriteFile(e.caBundle, bundle, 0o644); err != nil {
		return fmt.Errorf("trust bundle: %w", err)
	}
	return nil
}

// upstreamRoots are the roots the proxy verifies a secret's host with: the
// system's and the certificates in files (--upstream-ca).
func upstreamRoots(files []string) (*x509.CertPool, error) {
	pems, err := ReadPEMs(files)
	if err != nil {
		return nil, err
	}
	return egress.UpstreamRoots(pems, func(i int) string { return "--upstream-ca " + files[i] })
}

// ReadPEMs reads the files of --upstream-ca.
func ReadPEMs(files []string) ([][]byte, error) {
	var pems [][]byte
	for _, f := range files {
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--upstream-ca: %w", err)
		}
		pems = append(pems, pem)
	}
	return pems, nil
}

// secretValues are the memory that holds real values, for the sandbox's
// first process to wipe.
func (e *runEgress) secretValues() [][]byte { return egress.Values(e.secrets) }

// sandboxEnv gives each secret's variable its placeholder, and refuses to
// start a sandbox whose environment or command line would carry a real
// value in any other way (S3).
func (e *runEgress) sandboxEnv(env, args []string) ([]string, error) {
	return egress.PlaceholderEnv(e.secrets, env, args)
}

// sandboxProxy is the proxy for sandbox.Config (nil outside proxy mode).
func (e *runEgress) sandboxProxy() sandbox.Proxy {
	if e.proxy == nil {
		return nil
	}
	return e.proxy
}

// finish writes the traffic of allowed hosts to the report, closes it, and
// prints the summary of refusals, of the names the sandbox looked up, and
// of what would allow them.
func (e *runEgress) finish() {
	if e.proxy != nil {
		_ = e.proxy.Close()
		for _, ev := range e.proxy.Traffic() {
			e.rec.Record(ev)
		}
	}
	if e.report != nil {
		err := e.rec.Err()
		if cerr := e.report.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			fmt.Fprintf(e.stderr, "hutch: --report: %v\n", err)
		}
		e.report = nil
	}
	if e.caBundle != "" {
		_ = os.RemoveAll(filepath.Dir(e.caBundle))
		e.caBundle = ""
	}
	for _, line := range e.rec.Lines() {
		fmt.Fprintf(e.stderr, "hutch: %s\n", line)
	}
}

// newRunID names one `hutch run` sandbox in events.
func newRunID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "run-" + hex.EncodeToString(b[:])
}
