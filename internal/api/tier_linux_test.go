package api

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/client"
	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// testStateDir is a daemon's state directory, removed when the test ends.
// It is not under /tmp, which each sandbox replaces with a tmpfs of its
// own.
func testStateDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "hutch-api-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// realDaemon puts a real daemon (package daemon, real sandboxes) of cfg
// (its state directory made here unless cfg names one) behind the API of
// apiCfg on a unix socket, and returns it with an SDK client of the
// socket (the operator) and the socket's path. Both are closed when the
// test ends, unless the test closed the daemon.
func realDaemon(t *testing.T, cfg daemon.Config, apiCfg Config) (*daemon.Manager, *client.Client, string) {
	t.Helper()
	testutil.RequireRoot(t)
	if cfg.StateDir == "" {
		cfg.StateDir = testStateDir(t)
	}
	log := slog.New(slog.DiscardHandler)
	m, err := daemon.New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil && !errors.Is(err, daemon.ErrUnavailable) {
			t.Errorf("close: %v", err)
		}
	})
	apiCfg.Log = log
	h, err := NewWithConfig(m, apiCfg)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "hutch.sock")
	ls, err := Listen(sock, "")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(sctx, h, log, ls...) }()
	t.Cleanup(func() {
		stop()
		<-served
	})
	c, err := client.New("unix://"+sock, "")
	if err != nil {
		t.Fatal(err)
	}
	return m, c, sock
}

// scrapeSocket is GET /metrics on the unix socket at sock (the
// operator's series).
func scrapeSocket(t *testing.T, sock string) string {
	t.Helper()
	hc := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := hc.Get("http://hutch/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d, %v", resp.StatusCode, err)
	}
	return string(b)
}

// TestServedTier: through the SDK, against a real daemon of the default
// configuration, a create without a tier gets the default (namespace),
// which its answer, get, list, the audit entry of the create and the
// metrics' tier label say; a create of gvisor, which hutch serve does not
// run yet, is refused with a 400 that says so, and audited with the tier
// it asked for.
func TestServedTier(t *testing.T) {
	al, path := openAudit(t)
	_, c, sock := realDaemon(t, daemon.Config{}, Config{Audit: al})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	sb, err := c.Create(ctx, client.CreateOptions{Labels: map[string]string{"test": "tier"}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Tier != policy.TierNamespace {
		t.Errorf("create: tier %q, want namespace", sb.Tier)
	}
	if got, err := c.Get(ctx, sb.ID); err != nil || got.Tier != policy.TierNamespace {
		t.Errorf("get: %+v, %v", got, err)
	}
	if list, err := c.List(ctx, client.ListOptions{Labels: map[string]string{"test": "tier"}}); err != nil || len(list) != 1 || list[0].Tier != policy.TierNamespace {
		t.Errorf("list: %+v, %v", list, err)
	}
	if res, err := c.Run(ctx, sb.ID, client.Command{Args: []string{"echo", "ok"}}); err != nil || string(res.Stdout) != "ok\n" {
		t.Errorf("run: %+v, %v", res, err)
	}

	_, err = c.Create(ctx, client.CreateOptions{Tier: policy.TierGVisor})
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Code != client.CodeInvalid ||
		!strings.Contains(e.Message, "hutch serve does not run the gvisor tier") {
		t.Errorf("create of tier gvisor: %#v, want 400 invalid: hutch serve does not run the gvisor tier", err)
	}

	metrics := scrapeSocket(t, sock)
	for _, want := range []string{
		`hutch_sandboxes{state="running",tier="namespace"} 1` + "\n",
		`hutch_sandboxes{state="running",tier="gvisor"} 0` + "\n",
		`hutch_sandboxes_created_total{tier="gvisor"} 0` + "\n",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q:\n%s", want, metrics)
		}
	}
	if !strings.Contains(metrics, `hutch_sandboxes_created_total{tier="namespace"} `) {
		t.Errorf("metrics lack the created sandboxes of the namespace tier:\n%s", metrics)
	}

	// The entries of both creates: written once their answers went out.
	var creates []audit.Entry
	testutil.Eventually(time.Minute, func() bool {
		creates = nil
		for _, en := range readAudit(t, path) {
			if en.Action == "create" {
				creates = append(creates, en)
			}
		}
		return len(creates) == 2
	})
	if len(creates) != 2 || creates[0].Sandbox != sb.ID || creates[0].Tier != policy.TierNamespace || creates[0].Error != "" ||
		creates[1].Tier != policy.TierGVisor || creates[1].Error != CodeInvalid {
		t.Errorf("the creates' audit entries: %+v; want %s of namespace, then a refused one of gvisor", creates, sb.ID)
	}
}

// refusingRuntime stands for a tier the daemon does not run yet in the
// table of its runtimes: it starts nothing.
type refusingRuntime struct{ tier string }

func (r refusingRuntime) Tier() string { return r.tier }

func (r refusingRuntime) Run(context.Context, sandbox.Config) (sandbox.Result, error) {
	return sandbox.Result{}, errors.New("the test's runtime runs nothing")
}

func (r refusingRuntime) Start(sandbox.Config) (sandbox.Instance, error) {
	return nil, errors.New("the test's runtime starts nothing")
}

// TestServedMinTier: a daemon whose minimum tier is gvisor refuses, through
// the SDK, a create of the namespace tier with a 400 whose message names
// both tiers and the flag.
func TestServedMinTier(t *testing.T) {
	_, c, _ := realDaemon(t, daemon.Config{MinTier: policy.TierGVisor, Runtimes: map[string]sandbox.Runtime{
		policy.TierNamespace: sandbox.Namespaces{},
		policy.TierGVisor:    refusingRuntime{policy.TierGVisor},
	}}, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := c.Create(ctx, client.CreateOptions{Tier: policy.TierNamespace})
	var e *client.Error
	want := "tier: namespace is weaker than gvisor, the minimum tier of this daemon (hutch serve --min-tier gvisor)"
	if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Code != client.CodeInvalid || !strings.Contains(e.Message, want) {
		t.Errorf("create of tier namespace: %#v, want 400 invalid: %s", err, want)
	}
	if list, err := c.List(ctx, client.ListOptions{State: "stopped"}); err != nil || len(list) != 0 {
		t.Errorf("the refused create left records: %+v, %v", list, err)
	}
}
