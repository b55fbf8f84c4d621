package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/secrets"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// maxEnv bounds the environment an exec request adds.
const maxEnv = 1024

// CreateBody is the body of POST /v1/sandboxes.
type CreateBody struct {
	// Policy is the sandbox's policy in the policy-file schema, as JSON.
	Policy json.RawMessage `json:"policy,omitempty"`
	// Labels are the tenant's own key/value tags.
	Labels map[string]string `json:"labels,omitempty"`
	// Env is added to the environment of every command.
	Env map[string]string `json:"env,omitempty"`
	// Timeout is the sandbox's lifetime ("5m"; the daemon's default when
	// empty).
	Timeout string `json:"timeout,omitempty"`
	// IdleTimeout ends the sandbox after that long without use.
	IdleTimeout string `json:"idle_timeout,omitempty"`
	// Secrets are the real values of the policy's secrets, by name: a
	// secret of the policy without "from" takes its value from here. The
	// sandbox gets a placeholder; the daemon keeps the value in memory
	// only and swaps it in at the egress for the secret's hosts.
	Secrets map[string]secrets.Value `json:"secrets,omitempty"`
	// UpstreamCA holds PEM certificates the sandbox's proxy trusts too,
	// besides the daemon's roots, when it connects to the hosts of the
	// policy's secrets (for a secret's host behind a private CA). It
	// concerns only this sandbox's own secrets, so a tenant may give it.
	UpstreamCA string `json:"upstream_ca,omitempty"`
	// Snapshot, when set, is a snapshot of the tenant's the sandbox
	// starts from (its files over the snapshot's base; the policy's root
	// must be that base, or name none).
	Snapshot string `json:"snapshot,omitempty"`
	// ReviewWorkspace, when set, names a review workspace the operator
	// bound (hutch serve --review-workspace): the sandbox's workspace shows
	// its host directory, and what it writes there is kept as a change set
	// (GET /v1/changes) to apply or discard once the sandbox ended.
	ReviewWorkspace string `json:"review_workspace,omitempty"`
}

// TimeoutBody is the body of POST /v1/sandboxes/{id}/timeout.
type TimeoutBody struct {
	// Timeout is the sandbox's new remaining lifetime, from now.
	Timeout string `json:"timeout"`
}

func (h *handler) create(w http.ResponseWriter, r *http.Request) error {
	var b CreateBody
	if err := decodeBody(w, r, &b, true); err != nil {
		return err
	}
	req, err := createRequest(b, OriginOf(r.Context()))
	if err != nil {
		return err
	}
	start := time.Now()
	auditEntry(r).Tier = req.Policy.Tier // the tier asked for, if the create is refused
	info, err := h.m.Create(r.Context(), tenantOf(r), req)
	h.met.created(tenantOf(r), time.Since(start))
	if err != nil {
		return err
	}
	auditEntry(r).Sandbox = info.ID
	auditEntry(r).Image = info.Image
	auditEntry(r).Tier = info.Tier
	h.log.Debug("sandbox created", "id", info.ID, "tenant", info.Tenant)
	w.Header().Set("Location", "/v1/sandboxes/"+info.ID)
	writeJSON(w, http.StatusCreated, info)
	return nil
}

// createRequest checks a create body and turns it into the manager's
// request.
func createRequest(b CreateBody, origin Origin) (daemon.CreateRequest, error) {
	var req daemon.CreateRequest
	if p := bytes.TrimSpace(b.Policy); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		if p[0] != '{' {
			return req, errorf(daemon.ErrInvalid, "policy: want a JSON object in the policy-file schema")
		}
		spec, err := policy.Parse("policy", p)
		if err != nil {
			return req, errorf(daemon.ErrInvalid, "%v", err)
		}
		for i := range spec.Secrets {
			if s := &spec.Secrets[i]; s.From == "" {
				if _, ok := b.Secrets[s.Name]; ok {
					s.From = policy.SecretFromRequest
				}
			}
		}
		if origin != OriginLocal {
			if err := checkRemotePolicy(spec); err != nil {
				return req, err
			}
		}
		req.Policy = spec
	}
	if err := daemon.CheckLabels("labels", b.Labels); err != nil {
		return req, err
	}
	req.Snapshot = b.Snapshot
	req.ReviewWorkspace = b.ReviewWorkspace
	if err := daemon.CheckEnv("env", b.Env); err != nil {
		return req, err
	}
	var err error
	if req.Timeout, err = parseTimeout("timeout", b.Timeout); err != nil {
		return req, err
	}
	if req.IdleTimeout, err = parseTimeout("idle_timeout", b.IdleTimeout); err != nil {
		return req, err
	}
	req.Labels, req.Env, req.Secrets = b.Labels, b.Env, b.Secrets
	if b.UpstreamCA != "" {
		req.UpstreamCA = []byte(b.UpstreamCA)
	}
	req.Operator = origin == OriginLocal
	return req, nil
}

// checkRemotePolicy refuses the parts of a policy that reach into the host,
// which only the machine's operator (the unix socket) may ask for.
func checkRemotePolicy(s policy.Spec) error {
	var bad []string
	// An image of the daemon's store is fine: the daemon checks that it
	// is there, and allowed (hutch serve --allow-image).
	if _, img := s.Image(); s.Root != "" && s.Root != "host" && !img {
		bad = append(bad, "root")
	}
	if len(s.Filesystem.AllowWrite) > 0 {
		bad = append(bad, "filesystem.allow_write")
	}
	if len(s.Filesystem.AllowRead) > 0 {
		bad = append(bad, "filesystem.allow_read")
	}
	if s.Filesystem.NoDefaultDenies {
		bad = append(bad, "filesystem.no_default_denies")
	}
	if s.Network.Mode == "host" {
		bad = append(bad, "network.mode host")
	}
	if len(s.Network.AllowPrivate) > 0 {
		bad = append(bad, "network.allow_private")
	}
	for i, sec := range s.Secrets {
		if sec.From != policy.SecretFromRequest {
			bad = append(bad, fmt.Sprintf("secrets[%d].from (the daemon's own environment and files; give the value in the request's secrets instead)", i))
		}
	}
	if len(s.Env.Pass) > 0 {
		bad = append(bad, "env.pass")
	}
	if s.BestEffort {
		bad = append(bad, "best_effort")
	}
	if len(bad) > 0 {
		return errorf(ErrPermission, "policy: %s: only the daemon's operator (on its unix socket) may set these", strings.Join(bad, ", "))
	}
	return nil
}

// checkEnv bounds the environment an exec request adds (a create's is the
// daemon's to check: daemon.CheckEnv).
func checkEnv(field string, env map[string]string) error {
	if len(env) > maxEnv {
		return errorf(daemon.ErrInvalid, "%s: %d variables, at most %d", field, len(env), maxEnv)
	}
	for k, v := range env {
		if k == "" || strings.ContainsRune(k, '=') || strings.IndexByte(k, 0) >= 0 || strings.IndexByte(v, 0) >= 0 {
			return errorf(daemon.ErrInvalid, "%s: bad variable %q: names are not empty and contain no '=' or NUL, values no NUL", field, k)
		}
	}
	return nil
}

// envList turns env into NAME=VALUE entries, sorted by name.
func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

func (h *handler) list(w http.ResponseWriter, r *http.Request) error {
	q, err := query(r, "label", "state")
	if err != nil {
		return err
	}
	labels := map[string]string{}
	for _, kv := range q["label"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return errorf(daemon.ErrInvalid, "query: label %q: want KEY=VALUE", kv)
		}
		labels[k] = v
	}
	state, err := single(q, "state")
	if err != nil {
		return err
	}
	switch state {
	case "", store.StateStarting, store.StateRunning, store.StatePaused, store.StateStopping, store.StateStopped:
	default:
		return errorf(daemon.ErrInvalid, "query: unknown state %q", state)
	}
	infos, err := h.m.List(r.Context(), tenantOf(r), labels, state)
	if err != nil {
		return err
	}
	if infos == nil {
		infos = []daemon.Info{}
	}
	writeJSON(w, http.StatusOK, infos)
	return nil
}

func (h *handler) get(w http.ResponseWriter, r *http.Request) error {
	if _, err := query(r); err != nil {
		return err
	}
	info, err := h.m.Get(r.Context(), tenantOf(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}

func (h *handler) destroy(w http.ResponseWriter, r *http.Request) error {
	if _, err := query(r); err != nil {
		return err
	}
	id := r.PathValue("id")
	if err := h.m.Destroy(r.Context(), tenantOf(r), id); err != nil {
		return err
	}
	h.log.Debug("sandbox destroyed", "id", id, "tenant", tenantOf(r))
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *handler) extend(w http.ResponseWriter, r *http.Request) error {
	var b TimeoutBody
	if err := decodeBody(w, r, &b, false); err != nil {
		return err
	}
	d, err := parseTimeout("timeout", b.Timeout)
	if err != nil {
		return err
	}
	if d <= 0 {
		return errorf(daemon.ErrInvalid, "timeout: want a positive duration such as \"10m\"")
	}
	info, err := h.m.Extend(r.Context(), tenantOf(r), r.PathValue("id"), d)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}
