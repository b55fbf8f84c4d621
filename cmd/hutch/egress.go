package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"

	"github.com/hutch-sandbox/hutch/internal/egress"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// runEgress is the network side of one `hutch run`: the egress proxy in
// proxy mode, and the report of what it refused and let through.
type runEgress struct {
	proxy  *egress.Proxy
	rec    *egress.Recorder
	report *os.File
	stderr io.Writer
}

// newEgress sets up the proxy for spec's network policy and opens the
// report file (before the sandbox starts, so a bad path fails early).
func newEgress(spec policy.Spec, report string, stderr io.Writer, log *slog.Logger) (*runEgress, error) {
	e := &runEgress{stderr: stderr}
	if report != "" {
		f, err := os.OpenFile(report, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return nil, fmt.Errorf("--report: %w", err)
		}
		e.report = f
	}
	var w io.Writer
	if e.report != nil {
		w = e.report
	}
	e.rec = egress.NewRecorder(w)
	switch spec.Network.Mode {
	case "host":
		fmt.Fprintln(stderr, "hutch: warning: --net host: the sandbox shares the host's network; no egress policy applies")
		return e, nil
	case "proxy":
	default:
		return e, nil
	}
	cfg, err := egressConfig(spec.Network)
	if err != nil {
		e.finish()
		return nil, err
	}
	rules, err := egress.NewRules(cfg)
	if err != nil {
		e.finish()
		return nil, fmt.Errorf("network policy: %w", err)
	}
	e.proxy = &egress.Proxy{Rules: rules, Sandbox: newRunID(), Record: e.rec.Record, Log: log}
	return e, nil
}

// egressConfig turns the validated network policy into the proxy's.
func egressConfig(nw policy.Network) (egress.Config, error) {
	cfg := egress.Config{
		AllowDomains: nw.AllowedDomains,
		DenyDomains:  nw.DeniedDomains,
		AllowCIDRs:   nw.AllowedCIDRs,
	}
	for _, c := range nw.AllowPrivate {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return cfg, fmt.Errorf("network.allow_private: %w", err)
		}
		cfg.AllowPrivate = append(cfg.AllowPrivate, p.Masked())
	}
	for _, h := range nw.Hosts {
		name, addr, err := policy.SplitHostPin(h)
		if err != nil {
			return cfg, fmt.Errorf("network.hosts: %w", err)
		}
		if cfg.Hosts == nil {
			cfg.Hosts = map[string][]netip.Addr{}
		}
		cfg.Hosts[name] = append(cfg.Hosts[name], addr)
	}
	return cfg, nil
}

// sandboxProxy is the proxy for sandbox.Config (nil outside proxy mode).
func (e *runEgress) sandboxProxy() sandbox.Proxy {
	if e.proxy == nil {
		return nil
	}
	return e.proxy
}

// finish writes the traffic of allowed hosts to the report, closes it, and
// prints the one-line summary of refusals.
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
	if sum := e.rec.Summary(); sum != "" {
		fmt.Fprintf(e.stderr, "hutch: %s\n", sum)
	}
}

// newRunID names one `hutch run` sandbox in events.
func newRunID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "run-" + hex.EncodeToString(b[:])
}
