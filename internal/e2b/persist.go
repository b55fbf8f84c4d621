package e2b

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"

	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// What the handler keeps of a sandbox outlives the handler and is shared
// by every daemon of one store (the replicas of hutch serve on a
// cluster): its access tokens are derived from the handler's key
// (WithKey) and its id, and the rest of its record is a note in the
// sandbox's record (store.Sandbox.Notes). A handler that does not hold a
// sandbox's record reads it from there (load).

// noteKey is the key of E2B's note in a sandbox's record.
const noteKey = "e2b"

// KeyBytes is the size of the key access tokens are derived from.
const KeyBytes = 32

// WithKey gives the key the sandboxes' access tokens are derived from
// (KeyBytes of randomness, kept secret): daemons that share it and a
// store answer for each other's sandboxes, and a daemon started again
// with it keeps its sandboxes' tokens. Without it a handler makes a key
// of its own, which ends with it.
func WithKey(key []byte) Option {
	return func(h *Handler) { h.key = append([]byte(nil), key...) }
}

// NewKey makes a key for WithKey.
func NewKey() ([]byte, error) {
	key := make([]byte, KeyBytes)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	return key, nil
}

// derive is sandbox id's access token of kind ("envd", "traffic").
func (h *Handler) derive(kind, id string) string {
	mac := hmac.New(sha256.New, h.key)
	mac.Write([]byte(kind + "\x00" + id))
	return hex.EncodeToString(mac.Sum(nil)[:accessTokenBytes])
}

// note is a record as its sandbox's record keeps it: all but the tokens
// (derived) and the tenant (the record's own).
type note struct {
	Template       string       `json:"template,omitempty"`
	Network        *networkBody `json:"network,omitempty"`
	Internet       *bool        `json:"internet,omitempty"`
	PauseOnTimeout bool         `json:"pause_on_timeout,omitempty"`
	AutoResume     bool         `json:"auto_resume,omitempty"`
	User           string       `json:"user,omitempty"`
	Workdir        string       `json:"workdir,omitempty"`
}

// persist writes rec, sandbox id's record, into the sandbox's record.
func (h *Handler) persist(ctx context.Context, id string, rec record) {
	if h.m == nil {
		return
	}
	n, err := noteOf(rec)
	if err == nil {
		_, err = h.m.Store().UpdateSandbox(context.WithoutCancel(ctx), id, func(sb *store.Sandbox) error {
			sb.Notes[noteKey] = n
			return nil
		})
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		h.log.Error("keep the record of an E2B sandbox", "id", id, "err", err)
	}
}

// noteOf is rec as its sandbox's record keeps it (under noteKey).
func noteOf(rec record) (string, error) {
	b, err := json.Marshal(note{Template: rec.template, Network: rec.network, Internet: rec.internet,
		PauseOnTimeout: rec.pauseOnTimeout, AutoResume: rec.autoResume, User: rec.user, Workdir: rec.workdir})
	return string(b), err
}

// load reads sandbox id's record from its sandbox's record, unless the
// handler holds it: one made by another daemon of the store, or by this
// one before it started again. An id the daemon knows names no sandbox
// (daemon.Manager.Unknown) is not read: load runs before the request is
// authenticated.
func (h *Handler) load(ctx context.Context, id string) {
	if id == "" || h.m == nil {
		return
	}
	h.mu.Lock()
	held := h.records[id] != nil
	h.mu.Unlock()
	if held || h.m.Unknown(ctx, id) {
		return
	}
	sb, err := h.m.Store().GetSandbox(ctx, "", id)
	if err != nil {
		return
	}
	h.remember(sb)
}

// remember makes the record of sb, a sandbox's record, the handler's,
// unless it holds one; it returns the one it holds.
func (h *Handler) remember(sb store.Sandbox) *record {
	rec := &record{tenant: sb.Tenant, token: h.derive("envd", sb.ID), traffic: h.derive("traffic", sb.ID)}
	if v, ok := sb.Notes[noteKey]; ok {
		var n note
		if err := json.Unmarshal([]byte(v), &n); err == nil {
			rec.template, rec.network, rec.internet = n.Template, n.Network, n.Internet
			rec.pauseOnTimeout, rec.autoResume, rec.user, rec.workdir = n.PauseOnTimeout, n.AutoResume, n.User, n.Workdir
		}
	}
	if sb.State == store.StateStopped {
		rec.ended = time.Now()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if held := h.records[sb.ID]; held != nil {
		return held
	}
	h.records[sb.ID] = rec
	return rec
}

// loadAll reads the records of infos, tenant's sandboxes, that the
// handler does not hold from their sandboxes' records, in one list.
func (h *Handler) loadAll(ctx context.Context, tenant string, infos []daemon.Info) {
	if h.m == nil {
		return
	}
	h.mu.Lock()
	missing := 0
	for _, info := range infos {
		if h.records[info.ID] == nil {
			missing++
		}
	}
	h.mu.Unlock()
	if missing == 0 {
		return
	}
	sbs, err := h.m.Store().ListSandboxes(ctx, store.Filter{Tenant: tenant})
	if err != nil {
		return
	}
	for _, sb := range sbs {
		h.remember(sb)
	}
}
