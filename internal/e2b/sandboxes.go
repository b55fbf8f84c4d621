package e2b

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/netip"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/api"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// Bounds of requests.
const (
	// maxBody bounds every JSON request body, as hutch's own API does.
	maxBody = api.MaxJSONBody
	// maxPage is the largest (and default) page of a list.
	maxPage = 100
)

// Workspace is the working directory, and the home of the user "user", of
// every sandbox made through E2B's API.
const Workspace = "/home/user"

// allTraffic is the CIDR E2B's SDKs use for "every destination".
const allTraffic = "0.0.0.0/0"

// CreateBody is the body of POST /sandboxes and POST /v2/sandboxes (E2B's
// NewSandbox). It maps onto hutch as follows:
//
//   - templateID: "base" (or empty), the host's root read-only under the
//     sandbox's writable layer, or a template the handler was given
//     (WithTemplates: an image of the daemon's store); any other is
//     refused (404).
//   - timeout (seconds): the sandbox's lifetime (the daemon's default when
//     0 or absent).
//   - metadata: the sandbox's labels (the daemon's label rules apply: at
//     most 64, non-empty printable keys of at most 128 bytes, values of at
//     most 512 bytes of UTF-8 text).
//   - envVars: added to the environment of every command (at most 256,
//     128 KiB in all; names without '=', NUL or control characters,
//     values without NUL).
//   - allow_internet_access false: network mode "none" (loopback only).
//   - without network.allowOut (E2B's default, or allow_internet_access
//     true): the internet — every public host on ports 80 and 443 through
//     hutch's egress proxy, which still refuses loopback, private and
//     metadata addresses (none at all for a handler WithoutInternet).
//   - network.allowOut: only those hosts (domains, "*.domain", IP
//     addresses) and CIDRs ("0.0.0.0/0" or "*": the internet again);
//     network.denyOut: host names never reached (deny wins); "0.0.0.0/0"
//     there without allowOut leaves the sandbox offline, another CIDR while
//     the internet is allowed is refused.
//   - secure: accepted either way; envd always needs the access token, or
//     for /files a URL signed with it (downloadUrl, uploadUrl).
//   - network.allowPublicTraffic: whether the sandbox's ports (PORT-ID.D
//     under the handler's domain, WithDomain) answer without the
//     sandbox's traffic access token (E2b-Traffic-Access-Token); the
//     default is private (the token needed) unless WithPublicTraffic.
//   - network.maskRequestHost: the Host header the sandbox's servers
//     see in requests to its ports, "${PORT}" replaced by the port
//     (default: the host the client asked for).
//   - autoPause true (the SDK's lifecycle onTimeout 'pause'): the timeout
//     pauses the sandbox instead of ending it (daemon.Lifecycle), with its
//     memory unless autoPauseMemory is false (a filesystem-only pause:
//     it boots again, cold, on resume); autoResume.enabled: a paused
//     sandbox is resumed by the next envd request for it or traffic to
//     its ports (Wake), which needs autoPause and a pause with memory.
//   - volumeMounts [{name, path}]: the tenant's volumes (WithVolumes) by
//     name, each shown read-write at its absolute path (daemon.Volume);
//     an unknown name is 404 naming it, a malformed mount 400.
//   - network.rules: header transforms of the egress, E2B's secrets
//     among them (applyRules).
//   - mcp: accepted (an object) and otherwise ignored: E2B's SDK starts
//     the MCP gateway itself, as a command of the sandbox (mcp-gateway,
//     which a template must have: without it the SDK's create fails
//     with E2B's "Failed to start MCP gateway" and kills the sandbox).
//   - iam, network.egressProxy, and any field hutch does not know, are
//     refused with 400 naming them.
type CreateBody struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	Secure              *bool             `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             *networkBody      `json:"network"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          json.RawMessage   `json:"autoResume"`
	MCP                 json.RawMessage   `json:"mcp"`
	VolumeMounts        json.RawMessage   `json:"volumeMounts"`
	IAM                 json.RawMessage   `json:"iam"`
}

// networkBody is E2B's SandboxNetworkConfig.
type networkBody struct {
	AllowOut           []string        `json:"allowOut,omitempty"`
	DenyOut            []string        `json:"denyOut,omitempty"`
	AllowPublicTraffic *bool           `json:"allowPublicTraffic,omitempty"`
	MaskRequestHost    *string         `json:"maskRequestHost,omitempty"`
	Rules              json.RawMessage `json:"rules,omitempty"`
	EgressProxy        json.RawMessage `json:"egressProxy,omitempty"`
	HTTPSPorts         json.RawMessage `json:"httpsPorts,omitempty"`
}

// sandboxJSON is E2B's Sandbox, the answer of create and connect.
type sandboxJSON struct {
	TemplateID      string `json:"templateID"`
	SandboxID       string `json:"sandboxID"`
	ClientID        string `json:"clientID"`
	EnvdVersion     string `json:"envdVersion"`
	EnvdAccessToken string `json:"envdAccessToken"`
	// TrafficAccessToken opens the sandbox's ports when they are
	// private; null when they are public.
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// listedJSON is E2B's ListedSandbox.
type listedJSON struct {
	TemplateID   string            `json:"templateID"`
	SandboxID    string            `json:"sandboxID"`
	ClientID     string            `json:"clientID"`
	StartedAt    time.Time         `json:"startedAt"`
	EndAt        time.Time         `json:"endAt"`
	CPUCount     int               `json:"cpuCount"`
	MemoryMB     int               `json:"memoryMB"`
	DiskSizeMB   int               `json:"diskSizeMB"`
	Metadata     map[string]string `json:"metadata"`
	State        string            `json:"state"`
	EnvdVersion  string            `json:"envdVersion"`
	VolumeMounts []volumeMountJSON `json:"volumeMounts"`
}

// detailJSON is E2B's SandboxDetail, the answer of GET /sandboxes/{id}.
type detailJSON struct {
	listedJSON
	AllowInternetAccess *bool          `json:"allowInternetAccess,omitempty"`
	Network             *networkBody   `json:"network,omitempty"`
	Domain              *string        `json:"domain"`
	Lifecycle           *lifecycleJSON `json:"lifecycle,omitempty"`
}

// lifecycleJSON is E2B's SandboxLifecycle.
type lifecycleJSON struct {
	AutoResume bool   `json:"autoResume"`
	OnTimeout  string `json:"onTimeout"` // kill or pause
}

// timeoutBody is the body of POST /sandboxes/{id}/timeout, of pause
// (E2B's SandboxPauseRequest: memory only) and of connect and resume
// (memory false: resume without the memory the pause kept).
type timeoutBody struct {
	Timeout   *int64          `json:"timeout"`
	AutoPause *bool           `json:"autoPause"`
	Memory    json.RawMessage `json:"memory"`
}

// decode reads the JSON body of r into v, refusing unknown fields; an
// empty body leaves v as it is when optional.
func decode(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return fmt.Errorf("read body: larger than %d bytes: %w", maxBody, err)
	}
	if err != nil {
		// The client's body broke off.
		return errorf(daemon.ErrInvalid, "read body: %v", err)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		if optional {
			return nil
		}
		return errorf(daemon.ErrInvalid, "missing JSON body")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if strings.HasPrefix(err.Error(), "json: unknown field") {
			return errorf(errUnsupported, "body: %s: not supported by hutch", strings.TrimPrefix(err.Error(), "json: "))
		}
		// Every other failure (bad syntax, a truncated body, a value of
		// the wrong type) is the client's: 400.
		return errorf(daemon.ErrInvalid, "body: invalid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); err != io.EOF {
		return errorf(daemon.ErrInvalid, "body: invalid JSON: data after the object")
	}
	return nil
}

// seconds turns an E2B timeout in seconds into a duration; 0 when absent.
func seconds(field string, s *int64) (time.Duration, error) {
	if s == nil {
		return 0, nil
	}
	if *s < 0 || *s > int64(365*24*time.Hour/time.Second) {
		return 0, errorf(daemon.ErrInvalid, "%s: %d seconds is out of range", field, *s)
	}
	return time.Duration(*s) * time.Second, nil
}

// createRequest checks a create body and turns it into the manager's
// request.
func createRequest(b CreateBody, internet bool, check ruleCheck, templates map[string]string, lookup secretLookup) (daemon.CreateRequest, string, error) {
	var req daemon.CreateRequest
	var unsupported []string
	var err error
	if req.Lifecycle, _, err = lifecycleOf(b); err != nil {
		return req, "", err
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"iam", b.IAM}} {
		if present(f.raw) {
			unsupported = append(unsupported, f.name)
		}
	}
	if present(b.MCP) {
		var mcp map[string]json.RawMessage
		if err := json.Unmarshal(b.MCP, &mcp); err != nil {
			return req, "", errorf(daemon.ErrInvalid, "mcp: want an object of MCP servers: %v", err)
		}
	}
	if n := b.Network; n != nil {
		for _, f := range []struct {
			name string
			raw  json.RawMessage
		}{{"network.egressProxy", n.EgressProxy}, {"network.httpsPorts", n.HTTPSPorts}} {
			if present(f.raw) {
				unsupported = append(unsupported, f.name)
			}
		}
		if n.MaskRequestHost != nil {
			if err := checkMask(*n.MaskRequestHost); err != nil {
				return req, "", err
			}
		}
	}
	if len(unsupported) > 0 {
		return req, "", errorf(errUnsupported, "not supported by hutch: %s", strings.Join(unsupported, ", "))
	}
	// Checked here, looked up (their directories) by the handler.
	if req.Volumes, err = volumeMounts(b.VolumeMounts); err != nil {
		return req, "", err
	}
	template := b.TemplateID
	if template == "" {
		template = Template
	}
	ref, isImage := templates[template]
	if !isImage && template != Template {
		names := append([]string{Template}, slices.Sorted(maps.Keys(templates))...)
		return req, "", fmt.Errorf("%w: template %q (this daemon's templates: %s)", daemon.ErrNotFound, template, strings.Join(slices.Compact(names), ", "))
	}
	if req.Timeout, err = seconds("timeout", b.Timeout); err != nil {
		return req, "", err
	}
	spec := policy.Spec{}
	spec.Filesystem.Workspace = Workspace
	if isImage {
		spec.Root = policy.ImagePrefix + ref
	}
	if spec.Network, err = network(b.AllowInternetAccess, b.Network, internet, check); err != nil {
		return req, "", err
	}
	if b.Network != nil {
		if spec.Secrets, req.Secrets, err = applyRules(&spec.Network, b.Network.Rules, lookup); err != nil {
			return req, "", err
		}
	}
	if err := daemon.CheckLabels("metadata", b.Metadata); err != nil {
		return req, "", err
	}
	if err := daemon.CheckEnv("envVars", b.EnvVars); err != nil {
		return req, "", err
	}
	req.Policy = spec
	req.Labels, req.Env = b.Metadata, b.EnvVars
	return req, template, nil
}

// autoResumeBody is E2B's SandboxAutoResumeConfig.
type autoResumeBody struct {
	Enabled *bool `json:"enabled"`
}

// lifecycleOf is what b's timeout does (autoPause, autoPauseMemory) and
// whether the sandbox resumes on traffic (autoResume), checked as E2B
// does.
func lifecycleOf(b CreateBody) (life daemon.Lifecycle, autoResume bool, err error) {
	life.PauseOnTimeout = b.AutoPause != nil && *b.AutoPause
	if b.AutoPauseMemory != nil {
		if !life.PauseOnTimeout {
			return life, false, errorf(daemon.ErrInvalid, "autoPauseMemory: only with autoPause true (the SDK's lifecycle onTimeout 'pause')")
		}
		life.FilesOnly = !*b.AutoPauseMemory
	}
	if present(b.AutoResume) {
		var ar autoResumeBody
		dec := json.NewDecoder(bytes.NewReader(b.AutoResume))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ar); err != nil || ar.Enabled == nil {
			return life, false, errorf(daemon.ErrInvalid, "autoResume: want {\"enabled\": true or false}, not %.64s", b.AutoResume)
		}
		autoResume = *ar.Enabled
	}
	switch {
	case autoResume && !life.PauseOnTimeout:
		return life, false, errorf(daemon.ErrInvalid, "autoResume: can only be enabled when the sandbox pauses on its timeout (autoPause true)")
	case autoResume && life.FilesOnly:
		return life, false, errorf(daemon.ErrInvalid, "autoResume: cannot be enabled with autoPauseMemory false: a filesystem-only pause must be resumed explicitly (connect or resume)")
	}
	return life, autoResume, nil
}

// TemplatePolicy is the policy of a sandbox E2B's create makes of
// template and nothing else (the SDK's Sandbox.create(template) with its
// defaults), with templates the handler's (WithTemplates) and internet
// whether the daemon offers sandboxes the internet (not WithoutInternet):
// the policy of the template's warm pool (hutch serve --warm NAME=N),
// which such a create takes from. An unknown template is an error of
// category daemon.ErrNotFound.
func TemplatePolicy(template string, templates map[string]string, internet bool) (policy.Spec, error) {
	req, _, err := createRequest(CreateBody{TemplateID: template}, internet, nil, templates, nil)
	return req.Policy, err
}

// present reports whether a raw JSON field was given (and is not null).
func present(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null"
}

// network maps allow_internet_access and network onto hutch's network
// policy (see CreateBody). E2B's default is the internet: for hutch, every
// public destination on ports 80 and 443 through the sandbox's egress
// proxy, whose address guard still refuses loopback, private, link-local
// and metadata addresses. allowOut narrows that to its hosts and ranges;
// denyOut takes host names out (an address range can be taken out only of
// an explicit allowOut, where it is out anyway unless listed); denying
// all traffic without allowOut, or allow_internet_access false, leaves the
// sandbox offline. A daemon that offers no internet (offered false, hutch
// serve --no-internet) leaves a sandbox without allowOut offline, and
// refuses to be asked for the internet. check refuses an allowOut entry
// that asks for addresses only the daemon's operator may open (loopback,
// private, link-local, metadata, this host's): a tenant never may.
func network(internet *bool, n *networkBody, offered bool, check ruleCheck) (policy.Network, error) {
	var nw policy.Network
	var allowOut, denyOut []string
	if n != nil {
		allowOut, denyOut = n.AllowOut, n.DenyOut
	}
	if internet != nil && !*internet {
		if len(allowOut) > 0 {
			return nw, errorf(daemon.ErrInvalid, "allow_internet_access false and network.allowOut: the sandbox cannot be both offline and reach %s", strings.Join(allowOut, ", "))
		}
		nw.Mode = "none"
		return nw, nil
	}
	everything := func(a string) bool { return a == allTraffic || a == "*" }
	if !offered {
		if internet != nil && *internet && len(allowOut) == 0 {
			return nw, errorf(errUnsupported, "allow_internet_access true: this hutch serve gives sandboxes no internet access (--no-internet); list the hosts the sandbox may reach in network.allowOut")
		}
		if i := slices.IndexFunc(allowOut, everything); i >= 0 {
			return nw, errorf(errUnsupported, "network.allowOut %q: this hutch serve gives sandboxes no internet access (--no-internet); list the hosts", allowOut[i])
		}
	}
	for i, a := range allowOut {
		if !everything(a) {
			if err := check(fmt.Sprintf("network.allowOut[%d]", i), a, isCIDR(a)); err != nil {
				return nw, err
			}
		}
		switch {
		case everything(a):
			nw.AllowedDomains = append(nw.AllowedDomains, "*")
		case isCIDR(a):
			nw.AllowedCIDRs = append(nw.AllowedCIDRs, a)
		default:
			nw.AllowedDomains = append(nw.AllowedDomains, a)
		}
	}
	if len(allowOut) == 0 && offered && !slices.ContainsFunc(denyOut, everything) {
		nw.AllowedDomains = []string{"*"}
	}
	open := slices.Contains(nw.AllowedDomains, "*")
	for _, d := range denyOut {
		switch {
		case everything(d):
			// Everything not allowed is denied anyway.
		case isCIDR(d) && slices.Contains(nw.AllowedCIDRs, d):
			return nw, errorf(daemon.ErrInvalid, "network: %q is both allowed and denied", d)
		case isCIDR(d) && open:
			return nw, errorf(errUnsupported, "network.denyOut %q: with the internet allowed hutch denies host names, not address ranges; list what the sandbox may reach in network.allowOut instead", d)
		case isCIDR(d):
			// Denied already: the sandbox reaches only the allowed ranges.
		default:
			nw.DeniedDomains = append(nw.DeniedDomains, d)
		}
	}
	if len(nw.AllowedDomains)+len(nw.AllowedCIDRs) == 0 {
		nw.Mode = "none"
		nw.DeniedDomains = nil
		return nw, nil
	}
	nw.Mode = "proxy"
	return nw, nil
}

// ruleCheck checks an allow rule a tenant wrote (daemon.Sandboxes'
// CheckTenantRule).
type ruleCheck func(field, entry string, cidr bool) error

// isCIDR reports whether s is an IP address range (or a bare address).
func isCIDR(s string) bool {
	if _, err := netip.ParsePrefix(s); err == nil {
		return strings.Contains(s, "/")
	}
	return false
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request, tenant string) error {
	var b CreateBody
	if err := decode(w, r, &b, false); err != nil {
		return err
	}
	// A template the tenant built ("name", "name:tag" or its id), and a
	// snapshot's id or name, are templates too, as in E2B.
	built, isBuilt, err := h.resolveTemplate(tenant, b.TemplateID)
	if err != nil {
		return err
	}
	snapshot := built.snapshot
	if !isBuilt {
		if snapshot, err = h.snapshotTemplate(r.Context(), tenant, b.TemplateID); err != nil {
			return err
		}
	}
	if snapshot != "" {
		b.TemplateID = ""
	}
	if len(built.run.Env) > 0 {
		// The template's ENV, under the request's own.
		env := maps.Clone(built.run.Env)
		maps.Copy(env, b.EnvVars)
		b.EnvVars = env
	}
	req, template, err := createRequest(b, !h.noInternet, h.m.CheckTenantRule, h.templates, h.secretLookupOf(tenant))
	if err != nil {
		return err
	}
	if snapshot != "" {
		req.Snapshot, template = snapshot, snapshot
	}
	if isBuilt {
		// The build's base, whatever the server's "base" is now.
		req.Policy.Root, template = "", built.template
		withResources(&req.Policy.Resources, built.cpuCount, built.memoryMB)
	}
	internet := req.Policy.Network.Mode != "none"
	_, autoResume, _ := lifecycleOf(b) // checked by createRequest
	rec := &record{network: b.Network, internet: &internet, template: template,
		pauseOnTimeout: req.Lifecycle.PauseOnTimeout, autoResume: autoResume}
	if isBuilt {
		if built.run.User != userName {
			rec.user = built.run.User
		}
		if built.run.Workdir != Workspace {
			rec.workdir = built.run.Workdir
		}
	}
	// The record keeps rec from its first write.
	n, err := noteOf(*rec)
	if err != nil {
		return err
	}
	req.Notes = map[string]string{noteKey: n}
	release, err := h.holdVolumes(tenant, req.Volumes)
	if err != nil {
		return err
	}
	info, err := h.m.Create(r.Context(), tenant, req)
	release()
	if err != nil {
		return err
	}
	auditEntry(r).Sandbox = info.ID
	auditEntry(r).Image = info.Image
	auditEntry(r).Tier = info.Tier // the daemon's default: E2B's creates name none
	sb, err := h.started(r.Context(), tenant, info.ID, rec, false)
	if err != nil {
		return err
	}
	if err := h.startTemplate(r.Context(), tenant, info.ID, built.run); err != nil {
		if derr := h.m.Destroy(context.WithoutCancel(r.Context()), tenant, info.ID); derr != nil {
			h.log.Error("destroy a sandbox whose template did not start", "id", info.ID, "err", derr)
		}
		return fmt.Errorf("sandbox %s: %w", info.ID, err)
	}
	// Forget the records of the tenant's sandboxes that ended (by their
	// timeout, say) without this handler seeing it, so that the records
	// stay bounded by the tenant's quota and recent ends.
	if infos, err := h.m.List(r.Context(), tenant, nil, ""); err == nil {
		live := map[string]bool{info.ID: true}
		for _, i := range infos {
			if e2bState(i.State) != "" {
				live[i.ID] = true
			}
		}
		h.prune(tenant, live)
	}
	h.log.Debug("e2b sandbox created", "id", info.ID, "tenant", tenant)
	writeJSON(w, http.StatusCreated, sb)
	return nil
}

// started makes tenant's new sandbox id one of E2B's: its user set up,
// an envd access token, rec (its template and network) held and, when
// persist, written into its record (a create writes it with the record);
// a sandbox that cannot be is destroyed, even if the client went away
// meanwhile.
func (h *Handler) started(ctx context.Context, tenant, id string, rec *record, persist bool) (sandboxJSON, error) {
	cleanup := context.WithoutCancel(ctx)
	if err := h.setup(ctx, tenant, id); err != nil {
		if derr := h.m.Destroy(cleanup, tenant, id); derr != nil {
			h.log.Error("destroy a sandbox whose setup failed", "id", id, "err", derr)
		}
		return sandboxJSON{}, fmt.Errorf("sandbox %s: %w", id, err)
	}
	rec.tenant, rec.token, rec.traffic = tenant, h.derive("envd", id), h.derive("traffic", id)
	if persist {
		h.persist(ctx, id, *rec)
	}
	h.mu.Lock()
	h.records[id] = rec
	h.mu.Unlock()
	return h.answer(id, *rec), nil
}

// e2bState is E2B's state of a hutch sandbox: "running" or "paused"; ""
// for one that is gone or going.
func e2bState(s string) string {
	switch s {
	case store.StateStarting, store.StateRunning:
		return "running"
	case store.StatePaused:
		return "paused"
	}
	return ""
}

// listed is E2B's description of info.
func listed(info daemon.Info, template string) listedJSON {
	md := info.Labels
	if md == nil {
		md = map[string]string{}
	}
	return listedJSON{
		TemplateID: template, SandboxID: info.ID, ClientID: info.Tenant,
		StartedAt: info.CreatedAt.UTC(), EndAt: info.ExpiresAt.UTC(),
		CPUCount: cpuCount(info.Resources.CPUs), MemoryMB: int(info.Resources.MemoryBytes >> 20), DiskSizeMB: int(info.Resources.DiskBytes >> 20),
		Metadata: md, State: e2bState(info.State),
		EnvdVersion: EnvdVersion, VolumeMounts: mountsOf(info.Volumes),
	}
}

// live returns tenant's sandbox id, running or paused; ErrNotFound if it
// is gone or going.
func (h *Handler) live(r *http.Request, tenant, id string) (daemon.Info, error) {
	info, err := h.m.Get(r.Context(), tenant, id)
	if err != nil {
		return info, err
	}
	if e2bState(info.State) == "" {
		h.ended(id)
		return info, errorf(daemon.ErrNotFound, "sandbox %s: it is %s", id, info.State)
	}
	return info, nil
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request, tenant string) error {
	info, err := h.live(r, tenant, r.PathValue("id"))
	if err != nil {
		return err
	}
	rec, ok := h.record(r.Context(), tenant, info.ID)
	d := detailJSON{listedJSON: listed(info, h.templateOf(info.ID)), Domain: h.domainJSON()}
	if ok {
		d.AllowInternetAccess, d.Network = rec.internet, rec.network
		d.Lifecycle = &lifecycleJSON{AutoResume: rec.autoResume, OnTimeout: "kill"}
		if rec.pauseOnTimeout {
			d.Lifecycle.OnTimeout = "pause"
		}
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

// listQuery is the parsed query of a list.
type listQuery struct {
	metadata     map[string]string
	states       []string // E2B's states; empty: running and paused
	startedAfter time.Time
	template     string
	asc          bool // oldest first; E2B's default is newest first
	limit        int
	// after is the position nextToken names: the page starts after it.
	after *listKey
}

// listKey is a sandbox's place in a list, as E2B orders it: by start time
// to the microsecond, newest first, then by id; oldest first is the exact
// reverse.
type listKey struct {
	started time.Time
	id      string
}

// keyOf is the place of s in a list.
func keyOf(s listedJSON) listKey {
	return listKey{s.StartedAt.Truncate(time.Microsecond), s.SandboxID}
}

// compare orders a before b (-1) or after it (1) in a list newest first,
// or oldest first if asc.
func (a listKey) compare(b listKey, asc bool) int {
	if c := b.started.Compare(a.started); c != 0 {
		if asc {
			return -c
		}
		return c
	}
	c := strings.Compare(a.id, b.id)
	if asc {
		return -c
	}
	return c
}

// token is E2B's nextToken for a page that goes on after k: base64 of
// "TIME__ID", with "__asc" for a list oldest first.
func (k listKey) token(asc bool) string {
	s := k.started.UTC().Format(time.RFC3339Nano) + "__" + k.id
	if asc {
		s += "__asc"
	}
	return base64.URLEncoding.EncodeToString([]byte(s))
}

// parseToken reads a nextToken of a list ordered as asc says; one made
// for the other order is refused, as it would repeat a page.
func parseToken(tok string, asc bool) (listKey, error) {
	bad := errorf(daemon.ErrInvalid, "query: nextToken %.80q is not one this server gave for this order", tok)
	b, err := base64.URLEncoding.DecodeString(tok)
	if err != nil {
		return listKey{}, bad
	}
	parts := strings.Split(string(b), "__")
	if len(parts) < 2 || len(parts) > 3 || (len(parts) == 3) != asc || (asc && parts[2] != "asc") {
		return listKey{}, bad
	}
	t, err := time.Parse(time.RFC3339Nano, parts[0])
	if err != nil {
		return listKey{}, bad
	}
	return listKey{t.Truncate(time.Microsecond), parts[1]}, nil
}

// parseList parses the query of GET /sandboxes (v1 false) or
// /v2/sandboxes.
func parseList(q url.Values, v2 bool) (listQuery, error) {
	lq := listQuery{limit: maxPage}
	for k := range q {
		switch k {
		case "metadata":
		case "state", "nextToken", "limit", "startedAfter", "template", "order":
			if !v2 {
				return lq, errorf(errUnsupported, "query: %q: not a parameter of GET /sandboxes", k)
			}
		default:
			return lq, errorf(errUnsupported, "query: %q: not supported by hutch", k)
		}
	}
	if md := q.Get("metadata"); md != "" {
		pairs, err := url.ParseQuery(md)
		if err != nil {
			return lq, errorf(daemon.ErrInvalid, "query: metadata %q: %v", md, err)
		}
		lq.metadata = map[string]string{}
		for k, vs := range pairs {
			key, err1 := url.PathUnescape(k)
			val, err2 := url.PathUnescape(vs[len(vs)-1])
			if err := errors.Join(err1, err2); err != nil {
				return lq, errorf(daemon.ErrInvalid, "query: metadata %q: %v", md, err)
			}
			lq.metadata[key] = val
		}
	}
	if !v2 {
		lq.states = []string{"running"}
		return lq, nil
	}
	for _, s := range q["state"] {
		for st := range strings.SplitSeq(s, ",") {
			switch st {
			case "running", "paused":
				lq.states = append(lq.states, st)
			case "":
			default:
				return lq, errorf(daemon.ErrInvalid, "query: unknown state %q (running or paused)", st)
			}
		}
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxPage {
			return lq, errorf(daemon.ErrInvalid, "query: limit %q: want 1 to %d", s, maxPage)
		}
		lq.limit = n
	}
	if s := q.Get("startedAfter"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return lq, errorf(daemon.ErrInvalid, "query: startedAfter %q: want an RFC 3339 time", s)
		}
		lq.startedAfter = t.Truncate(time.Microsecond)
	}
	lq.template = q.Get("template")
	switch o := q.Get("order"); o {
	case "", "desc":
	case "asc":
		lq.asc = true
	default:
		return lq, errorf(daemon.ErrInvalid, "query: order %q: want asc or desc", o)
	}
	if s := q.Get("nextToken"); s != "" {
		k, err := parseToken(s, lq.asc)
		if err != nil {
			return lq, err
		}
		lq.after = &k
	}
	return lq, nil
}

// list answers the sandboxes of tenant that match lq, a page of them.
func (h *Handler) list(w http.ResponseWriter, r *http.Request, tenant string, lq listQuery) error {
	infos, err := h.m.List(r.Context(), tenant, lq.metadata, "")
	if err != nil {
		return err
	}
	h.loadAll(r.Context(), tenant, infos)
	states := lq.states
	if len(states) == 0 {
		states = []string{"running", "paused"}
	}
	live := map[string]bool{}
	out := []listedJSON{}
	for _, info := range infos {
		st := e2bState(info.State)
		if st != "" {
			live[info.ID] = true
		}
		if st == "" || !slices.Contains(states, st) ||
			(lq.template != "" && lq.template != Template) ||
			(!lq.startedAfter.IsZero() && info.CreatedAt.Truncate(time.Microsecond).Before(lq.startedAfter)) {
			continue
		}
		out = append(out, listed(info, h.templateOf(info.ID)))
	}
	if lq.metadata == nil {
		h.prune(tenant, live)
	}
	if slices.Contains(states, "running") {
		running := 0
		for _, s := range out {
			if s.State == "running" {
				running++
			}
		}
		w.Header().Set("X-Total-Running", strconv.Itoa(running))
	}
	// As E2B lists: newest first unless asked otherwise; a page goes on
	// after the place its token names (keyset, not an offset: a sandbox
	// made or gone meanwhile moves nothing on the next page).
	slices.SortFunc(out, func(a, b listedJSON) int { return keyOf(a).compare(keyOf(b), lq.asc) })
	if lq.after != nil {
		i, _ := slices.BinarySearchFunc(out, *lq.after, func(s listedJSON, k listKey) int {
			if keyOf(s).compare(k, lq.asc) <= 0 {
				return -1
			}
			return 1
		})
		out = out[i:]
	}
	if len(out) > lq.limit {
		out = out[:lq.limit]
		w.Header().Set("X-Next-Token", keyOf(out[len(out)-1]).token(lq.asc))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) listV1(w http.ResponseWriter, r *http.Request, tenant string) error {
	lq, err := parseList(r.URL.Query(), false)
	if err != nil {
		return err
	}
	lq.limit = int(^uint(0) >> 1)
	return h.list(w, r, tenant, lq)
}

func (h *Handler) listV2(w http.ResponseWriter, r *http.Request, tenant string) error {
	lq, err := parseList(r.URL.Query(), true)
	if err != nil {
		return err
	}
	return h.list(w, r, tenant, lq)
}

func (h *Handler) kill(w http.ResponseWriter, r *http.Request, tenant string) error {
	id := r.PathValue("id")
	if _, err := h.live(r, tenant, id); err != nil {
		return err
	}
	if err := h.m.Destroy(r.Context(), tenant, id); err != nil {
		return err
	}
	h.ended(id)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) setTimeout(w http.ResponseWriter, r *http.Request, tenant string) error {
	var b timeoutBody
	if err := decode(w, r, &b, false); err != nil {
		return err
	}
	if b.AutoPause != nil || present(b.Memory) {
		return errorf(errUnsupported, "body: only timeout is supported")
	}
	d, err := seconds("timeout", b.Timeout)
	if err != nil {
		return err
	}
	if d <= 0 {
		return errorf(daemon.ErrInvalid, "timeout: want a positive number of seconds")
	}
	id := r.PathValue("id")
	if _, err := h.live(r, tenant, id); err != nil {
		return err
	}
	if _, err := h.m.Extend(r.Context(), tenant, id, d); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// refreshBody is the body of POST /sandboxes/{id}/refreshes.
type refreshBody struct {
	Duration *int64 `json:"duration"`
}

// refresh keeps the sandbox alive for duration seconds from now (unless it
// was to live longer anyway).
func (h *Handler) refresh(w http.ResponseWriter, r *http.Request, tenant string) error {
	var b refreshBody
	if err := decode(w, r, &b, true); err != nil {
		return err
	}
	d, err := seconds("duration", b.Duration)
	if err != nil {
		return err
	}
	if d == 0 {
		d = 60 * time.Second
	}
	if err := h.extendTo(r, tenant, r.PathValue("id"), d); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// extendTo makes sandbox id live at least d from now.
func (h *Handler) extendTo(r *http.Request, tenant, id string, d time.Duration) error {
	info, err := h.live(r, tenant, id)
	if err != nil {
		return err
	}
	if d > 0 && time.Until(info.ExpiresAt) < d {
		if _, err := h.m.Extend(r.Context(), tenant, id, d); err != nil {
			return err
		}
	}
	return nil
}

// memoryOf is the memory field of a body: true when absent (E2B's
// default), else it must be a boolean.
func memoryOf(raw json.RawMessage) (bool, error) {
	if !present(raw) {
		return true, nil
	}
	var mem bool
	if err := json.Unmarshal(raw, &mem); err != nil {
		return false, errorf(daemon.ErrInvalid, "memory: want true or false, not %.32s", raw)
	}
	return mem, nil
}

// pause is POST /sandboxes/{id}/pause: 204 once paused, 409 if it is
// paused already. Memory false pauses it without its memory (every
// process but its agent killed, its files kept: E2B's filesystem-only
// snapshot); a sandbox that cannot be is an error, never paused with its
// memory instead.
func (h *Handler) pause(w http.ResponseWriter, r *http.Request, tenant string) error {
	var b timeoutBody
	if err := decode(w, r, &b, true); err != nil {
		return err
	}
	if b.Timeout != nil || b.AutoPause != nil {
		return errorf(errUnsupported, "body: pause takes memory only")
	}
	mem, err := memoryOf(b.Memory)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	if _, err := h.live(r, tenant, id); err != nil {
		return err
	}
	if _, err := h.m.PauseWith(r.Context(), tenant, id, daemon.PauseOptions{FilesOnly: !mem}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// resumeOptions are the options of a resume (connect or resume) whose
// body's memory is raw: memory false (the SDK's onResume 'reboot') boots
// a sandbox paused with its memory again, cold, as E2B does; on one
// paused without memory it asks for nothing more (it boots cold anyway),
// on a running one it is a no-op.
func resumeOptions(raw json.RawMessage) (daemon.ResumeOptions, error) {
	mem, err := memoryOf(raw)
	return daemon.ResumeOptions{Reboot: !mem}, err
}

// resume is E2B's older POST /sandboxes/{id}/resume: 201 with the
// sandbox, 409 if it is not paused.
func (h *Handler) resume(w http.ResponseWriter, r *http.Request, tenant string) error {
	var b timeoutBody
	if err := decode(w, r, &b, true); err != nil {
		return err
	}
	if b.AutoPause != nil && *b.AutoPause {
		return errorf(errUnsupported, "autoPause: a sandbox pauses on its timeout as its create asked (autoPause, the SDK's lifecycle onTimeout); not on resume or connect")
	}
	d, err := seconds("timeout", b.Timeout)
	if err != nil {
		return err
	}
	o, err := resumeOptions(b.Memory)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	if _, err := h.live(r, tenant, id); err != nil {
		return err
	}
	if _, err := h.m.ResumeWith(r.Context(), tenant, id, o); err != nil {
		return err
	}
	return h.answerSandbox(w, r, tenant, id, d, http.StatusCreated)
}

// connect is POST /v2/sandboxes/{id}/connect: resumes the sandbox if it is
// paused (201), or just answers it (200); a timeout makes it live at least
// that long from now.
func (h *Handler) connect(w http.ResponseWriter, r *http.Request, tenant string) error {
	var b timeoutBody
	if err := decode(w, r, &b, true); err != nil {
		return err
	}
	if b.AutoPause != nil {
		return errorf(errUnsupported, "autoPause: a sandbox pauses on its timeout as its create asked (autoPause, the SDK's lifecycle onTimeout); not on resume or connect")
	}
	d, err := seconds("timeout", b.Timeout)
	if err != nil {
		return err
	}
	o, err := resumeOptions(b.Memory)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	info, err := h.live(r, tenant, id)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if info.State == store.StatePaused {
		auditEntry(r).Action = "resume"
		if _, err := h.m.ResumeWith(r.Context(), tenant, id, o); err != nil && !errors.Is(err, daemon.ErrConflict) {
			return err
		}
		status = http.StatusCreated
	}
	return h.answerSandbox(w, r, tenant, id, d, status)
}

// answerSandbox extends sandbox id to live at least d, and answers it with
// its envd access token.
func (h *Handler) answerSandbox(w http.ResponseWriter, r *http.Request, tenant, id string, d time.Duration, status int) error {
	if err := h.extendTo(r, tenant, id, d); err != nil {
		return err
	}
	if _, err := h.token(r.Context(), tenant, id); err != nil {
		return err
	}
	rec, _ := h.record(r.Context(), tenant, id)
	if rec.template == "" {
		rec.template = Template
	}
	writeJSON(w, status, h.answer(id, rec))
	return nil
}

// cpuCount is E2B's cpuCount of a sandbox limited to cpus CPUs: whole
// CPUs, rounded up; the host's when it is not limited.
func cpuCount(cpus float64) int {
	if cpus <= 0 {
		return runtime.NumCPU()
	}
	return int(math.Ceil(cpus))
}
