package e2b

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/daemon"
)

// networkUpdateBody is E2B's SandboxNetworkUpdateConfig, the body of PUT
// /sandboxes/{id}/network: it replaces the sandbox's egress rules whole,
// a field left out clearing them (no allowOut: the internet, as at
// create). allowOut, denyOut, allow_internet_access and rules map as
// create's do (see CreateBody, applyRules); egressProxy is refused, as at
// create. rules may name only secrets the sandbox was given at its create,
// for the hosts they were given for: a secret's hosts are fixed then.
type networkUpdateBody struct {
	AllowOut            []string        `json:"allowOut"`
	DenyOut             []string        `json:"denyOut"`
	EgressProxy         json.RawMessage `json:"egressProxy"`
	Rules               json.RawMessage `json:"rules"`
	AllowInternetAccess *bool           `json:"allow_internet_access"`
}

// updateNetwork answers PUT /sandboxes/{id}/network: the sandbox's egress
// proxy obeys the new rules from its next connection on, and closes the
// open ones they refuse (daemon.Manager.UpdateNetwork); 204.
func (h *Handler) updateNetwork(w http.ResponseWriter, r *http.Request, tenant string) error {
	var b networkUpdateBody
	if err := decode(w, r, &b, false); err != nil {
		return err
	}
	var unsupported []string
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"egressProxy", b.EgressProxy}} {
		if present(f.raw) {
			unsupported = append(unsupported, f.name)
		}
	}
	if len(unsupported) > 0 {
		return errorf(errUnsupported, "not supported by hutch: %s", strings.Join(unsupported, ", "))
	}
	nb := &networkBody{AllowOut: b.AllowOut, DenyOut: b.DenyOut, Rules: b.Rules}
	nw, err := network(b.AllowInternetAccess, nb, !h.noInternet, h.m.CheckTenantRule)
	if err != nil {
		return err
	}
	// The secrets' values were given at create; the daemon checks that
	// the rules name only those, for their hosts.
	if _, _, err := applyRules(&nw, b.Rules, h.secretLookupOf(tenant)); err != nil {
		return err
	}
	up, ok := h.m.(daemon.Networker)
	if !ok {
		return errorf(daemon.ErrUnsupported, "this daemon cannot change a sandbox's network")
	}
	id := r.PathValue("id")
	if _, err := h.live(r, tenant, id); err != nil {
		return err
	}
	auditEntry(r).Sandbox = id
	got, err := up.UpdateNetwork(r.Context(), tenant, id, nw, false)
	if err != nil {
		return err
	}
	internet := got.Mode != "none"
	h.load(r.Context(), id)
	h.mu.Lock()
	var changed *record
	if rec := h.records[id]; rec != nil && rec.tenant == tenant {
		if rec.network != nil {
			// What the update does not touch (allowPublicTraffic) stays.
			kept := *rec.network
			kept.AllowOut, kept.DenyOut, kept.Rules = nb.AllowOut, nb.DenyOut, nb.Rules
			nb = &kept
		}
		rec.network, rec.internet = nb, &internet
		cp := *rec
		changed = &cp
	}
	h.mu.Unlock()
	if changed != nil {
		h.persist(r.Context(), id, *changed)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
