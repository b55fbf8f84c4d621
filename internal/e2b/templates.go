package e2b

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/policy"
)

// E2B's templates (the SDK's Template.build, buildInBackground,
// getBuildStatus, exists, assignTags, removeTags, getTags): a tenant's
// template is a name with builds, each build a snapshot of the tenant's
// (daemon.Snapshotter) made by running the build's steps in a sandbox of
// the tenant's own (build.go); tags name builds ("default" the one a
// plain name starts). The registry is the handler's, kept in
// WithTemplateDir's directory with the files the builds' COPY steps
// upload. Every template is its tenant's: another tenant neither sees
// nor uses it (its names are its tenant's), and none is public — the
// daemon's own templates ("base", hutch serve --template) are the public
// ones, which every tenant starts from and none changes.

// Bounds of templates, per tenant.
const (
	maxTemplates     = 64        // templates a tenant keeps
	maxBuildsRunning = 2         // builds of a tenant at once
	maxBuildsKept    = 16        // builds a template keeps (the oldest finished go)
	maxTags          = 32        // tags of a template
	maxSteps         = 256       // steps of a build
	maxStepArg       = 64 << 10  // bytes of one step argument
	maxUpload        = 512 << 20 // bytes of one uploaded COPY archive
	maxUploadsBytes  = 2 << 30   // bytes of a tenant's uploaded archives
	uploadLinkTTL    = time.Hour // how long an upload link is good for
	defaultTag       = "default" // the tag a name without one means
)

// templateIDChars is the length of a template's id: E2B's form, lowercase
// letters and digits.
const templateIDChars = 20

// tmpl is a tenant's template.
type tmpl struct {
	ID      string               `json:"id"`
	Tenant  string               `json:"tenant"`
	Name    string               `json:"name"`
	Created time.Time            `json:"created"`
	Updated time.Time            `json:"updated"`
	Builds  []*build             `json:"builds"` // oldest first
	Tags    map[string]string    `json:"tags"`   // tag → build id
	TagTime map[string]time.Time `json:"tagTime"`
	// uploads are the COPY archives uploaded for it, by files hash.
	Uploads map[string]int64 `json:"uploads"` // size
	// links are the upload links given out: token → files hash.
	links map[string]uploadLink
}

// uploadLink is an upload link given out.
type uploadLink struct {
	hash    string
	expires time.Time
}

// build is one build of a template.
type build struct {
	ID       string    `json:"id"`
	Status   string    `json:"status"` // waiting, building, ready, error
	CPUCount int       `json:"cpuCount"`
	MemoryMB int       `json:"memoryMB"`
	Created  time.Time `json:"created"`
	Updated  time.Time `json:"updated"`
	Finished time.Time `json:"finished,omitzero"`
	// Snapshot is the snapshot it made (when ready).
	Snapshot string `json:"snapshot,omitempty"`
	// Reason is why it failed.
	Reason *reasonJSON `json:"reason,omitempty"`
	// Tags are the tags it gets once ready.
	Want []string `json:"want,omitempty"`
	// Run is what sandboxes started from it run and have.
	Run runConfig `json:"run"`

	logs   []logJSON // in memory only
	cancel context.CancelFunc
}

// runConfig is what a build leaves for the sandboxes started from it.
type runConfig struct {
	Env      map[string]string `json:"env,omitempty"`
	Workdir  string            `json:"workdir,omitempty"`
	User     string            `json:"user,omitempty"`
	StartCmd string            `json:"startCmd,omitempty"`
	ReadyCmd string            `json:"readyCmd,omitempty"`
}

// logJSON is E2B's BuildLogEntry.
type logJSON struct {
	Timestamp time.Time `json:"timestamp"`
	Message   string    `json:"message"`
	Level     string    `json:"level"`
	Step      string    `json:"step,omitempty"`
}

// reasonJSON is E2B's BuildStatusReason.
type reasonJSON struct {
	Message    string    `json:"message"`
	Step       string    `json:"step,omitempty"`
	LogEntries []logJSON `json:"logEntries"`
}

// registry is the handler's templates.
type registry struct {
	dir string // WithTemplateDir's; "" without templates

	mu    sync.Mutex
	byID  map[string]*tmpl
	build sync.WaitGroup // the builds running
}

// WithTemplateDir lets tenants build templates (E2B's template API),
// keeping their registry and the files the builds upload in dir, which is
// made if need be; without, the template routes answer 501.
func WithTemplateDir(dir string) Option {
	return func(h *Handler) { h.reg.dir = dir }
}

// registryFile is the registry's file in the template directory.
const registryFile = "templates.json"

// openTemplates loads the registry from its directory: builds that were
// running when the daemon stopped failed.
func (h *Handler) openTemplates() error {
	h.reg.byID = map[string]*tmpl{}
	if h.reg.dir == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(h.reg.dir, "uploads"), 0o700); err != nil {
		return fmt.Errorf("template directory: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(h.reg.dir, registryFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("template registry: %w", err)
	}
	var all []*tmpl
	if err := json.Unmarshal(b, &all); err != nil {
		return fmt.Errorf("template registry %s: %w", filepath.Join(h.reg.dir, registryFile), err)
	}
	for _, t := range all {
		t.links = map[string]uploadLink{}
		for _, b := range t.Builds {
			if b.Status == statusBuilding || b.Status == statusWaiting {
				b.Status, b.Reason = statusError, &reasonJSON{Message: "the server restarted during the build", LogEntries: []logJSON{}}
			}
			b.logs = h.loadLogs(b.ID)
		}
		h.reg.byID[t.ID] = t
	}
	return nil
}

// logsPath is the file of build id's log, kept once the build ended.
func (h *Handler) logsPath(id string) string {
	return filepath.Join(h.reg.dir, "logs", id+".json")
}

// saveLogs keeps bd's log in its file, for after a restart. Under reg.mu.
func (h *Handler) saveLogs(bd *build) {
	if h.reg.dir == "" {
		return
	}
	b, err := json.Marshal(bd.logs)
	if err == nil {
		if err = os.MkdirAll(filepath.Dir(h.logsPath(bd.ID)), 0o700); err == nil {
			tmp := h.logsPath(bd.ID) + ".tmp"
			if err = os.WriteFile(tmp, b, 0o600); err == nil {
				err = os.Rename(tmp, h.logsPath(bd.ID))
			}
		}
	}
	if err != nil {
		h.log.Error("save a build's log", "build", bd.ID, "err", err)
	}
}

// maxLogsFile bounds the log file read back: maxLogEntries entries of a
// few KiB at most.
const maxLogsFile = 64 << 20

// loadLogs reads build id's kept log; none (nil) when there is no file,
// or when it is unreadable (logged).
func (h *Handler) loadLogs(id string) []logJSON {
	f, err := os.Open(h.logsPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var out []logJSON
	if err == nil {
		defer f.Close()
		err = json.NewDecoder(io.LimitReader(f, maxLogsFile)).Decode(&out)
	}
	if err != nil {
		h.log.Warn("read a build's log", "build", id, "err", err)
		return nil
	}
	return out[:min(len(out), maxLogEntries)]
}

// dropLogs removes build id's kept log. Under reg.mu.
func (h *Handler) dropLogs(id string) {
	if h.reg.dir == "" {
		return
	}
	if err := os.Remove(h.logsPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		h.log.Warn("remove a build's log", "build", id, "err", err)
	}
}

// save writes the registry to its file. Under reg.mu.
func (h *Handler) save() {
	if h.reg.dir == "" {
		return
	}
	all := slices.SortedFunc(maps.Values(h.reg.byID), func(a, b *tmpl) int { return strings.Compare(a.ID, b.ID) })
	b, err := json.Marshal(all)
	if err == nil {
		tmp := filepath.Join(h.reg.dir, registryFile+".tmp")
		if err = os.WriteFile(tmp, b, 0o600); err == nil {
			err = os.Rename(tmp, filepath.Join(h.reg.dir, registryFile))
		}
	}
	if err != nil {
		h.log.Error("save the template registry", "err", err)
	}
}

// Close cancels the builds running and waits for them to end.
func (h *Handler) Close() {
	h.reg.mu.Lock()
	for _, t := range h.reg.byID {
		for _, b := range t.Builds {
			if b.cancel != nil {
				b.cancel()
			}
		}
	}
	h.reg.mu.Unlock()
	h.reg.build.Wait()
}

// Build statuses.
const (
	statusWaiting  = "waiting"
	statusBuilding = "building"
	statusReady    = "ready"
	statusError    = "error"
)

// templatesOn is the error of a handler without templates.
func (h *Handler) templatesOn() error {
	if h.reg.dir == "" {
		return errorf(errNoRoute, "templates: this server builds none (hutch serve without a state directory for them)")
	}
	if _, ok := h.m.(daemon.Snapshotter); !ok {
		return errorf(errNoRoute, "templates: this server keeps no snapshots, which builds make")
	}
	return nil
}

// randomHex returns n random bytes in hexadecimal.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newTemplateID returns a new template id.
func newTemplateID() string {
	const chars = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, templateIDChars)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = chars[int(b[i])%len(chars)]
	}
	return string(b)
}

// newBuildID returns a new build id, a UUID (version 4) as E2B's.
func newBuildID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	x := hex.EncodeToString(b[:])
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:]
}

// checkName checks a template's name: lowercase letters, digits, '-', '_'
// and '.', at most 64, starting with a letter or digit.
func checkName(field, name string) error {
	ok := name != "" && len(name) <= 64
	for i, c := range name {
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		ok = ok && (alnum || i > 0 && (c == '-' || c == '_' || c == '.'))
	}
	if !ok {
		return errorf(daemon.ErrInvalid, "%s %.80q: a template's name is lowercase letters, digits, '-', '_' and '.', at most 64, starting with a letter or digit", field, name)
	}
	return nil
}

// checkTag checks a tag: letters, digits, '-', '_' and '.', at most 128,
// starting with a letter or digit.
func checkTag(field, tag string) error {
	ok := tag != "" && len(tag) <= 128
	for i, c := range tag {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		ok = ok && (alnum || i > 0 && (c == '-' || c == '_' || c == '.'))
	}
	if !ok {
		return errorf(daemon.ErrInvalid, "%s %.140q: a tag is letters, digits, '-', '_' and '.', at most 128, starting with a letter or digit (no ':')", field, tag)
	}
	return nil
}

// splitName splits "name:tag" (tag "" when there is none) and checks both.
func splitName(field, s string) (name, tag string, err error) {
	name, tag, hasTag := strings.Cut(s, ":")
	if err := checkName(field, name); err != nil {
		return "", "", err
	}
	if hasTag {
		if err := checkTag(field+" tag", tag); err != nil {
			return "", "", err
		}
	}
	return name, tag, nil
}

// daemonTemplate reports whether name is one of the daemon's own templates, which
// every tenant starts from and none changes.
func (h *Handler) daemonTemplate(name string) bool {
	return name == Template || h.templates[name] != ""
}

// find returns tenant's template that ref names (its id or name), nil if
// none. Under reg.mu.
func (h *Handler) find(tenant, ref string) *tmpl {
	if t := h.reg.byID[ref]; t != nil && t.Tenant == tenant {
		return t
	}
	for _, t := range h.reg.byID {
		if t.Tenant == tenant && t.Name == ref {
			return t
		}
	}
	return nil
}

// buildOf returns t's build id, nil if none. Under reg.mu.
func (t *tmpl) buildOf(id string) *build {
	for _, b := range t.Builds {
		if b.ID == id {
			return b
		}
	}
	return nil
}

// resolved is a build a sandbox starts from.
type resolved struct {
	template, snapshot string
	run                runConfig
	// cpuCount and memoryMB are the build's (E2B's template resources),
	// 0 when it gave none.
	cpuCount, memoryMB int
}

// withResources gives a sandbox of a template its resources: cpuCount
// CPUs and memoryMB MiB of memory, each where it is given (not 0). The
// daemon holds them to its bounds (--max-memory, --max-cpus) as any
// create's.
func withResources(r *policy.Resources, cpuCount, memoryMB int) {
	if cpuCount > 0 {
		r.CPUs = float64(cpuCount)
	}
	if memoryMB > 0 {
		r.MemoryBytes = int64(memoryMB) << 20
	}
}

// resolveTemplate returns the ready build of tenant's template that ref
// ("name", "name:tag" or the template's id) names, ok false when ref names
// none of tenant's templates; an error when it names one without such a
// ready build.
func (h *Handler) resolveTemplate(tenant, ref string) (resolved, bool, error) {
	name, tag, _ := strings.Cut(ref, ":")
	if tag == "" {
		tag = defaultTag
	}
	h.reg.mu.Lock()
	defer h.reg.mu.Unlock()
	t := h.find(tenant, name)
	if t == nil {
		return resolved{}, false, nil
	}
	b := t.buildOf(t.Tags[tag])
	if b == nil || b.Status != statusReady {
		return resolved{}, true, errorf(daemon.ErrNotFound, "template %s: no ready build tagged %q", name, tag)
	}
	return resolved{template: t.ID, snapshot: b.Snapshot, run: b.Run, cpuCount: b.CPUCount, memoryMB: b.MemoryMB}, true, nil
}

// templateRequest is E2B's TemplateBuildRequestV3.
type templateRequest struct {
	Name     string   `json:"name"`
	Alias    string   `json:"alias"`
	Tags     []string `json:"tags"`
	TeamID   string   `json:"teamID"`
	CPUCount int      `json:"cpuCount"`
	MemoryMB int      `json:"memoryMB"`
}

// requestBuild is POST /v3/templates: a new build (waiting for its
// steps) of the tenant's template of that name, made if it has none.
func (h *Handler) requestBuild(w http.ResponseWriter, r *http.Request, tenant string) error {
	if err := h.templatesOn(); err != nil {
		return err
	}
	var b templateRequest
	if err := decode(w, r, &b, false); err != nil {
		return err
	}
	if b.Name == "" {
		b.Name = b.Alias
	}
	name, tag, err := splitName("name", b.Name)
	if err != nil {
		return err
	}
	if h.daemonTemplate(name) {
		return errorf(daemon.ErrInvalid, "name %q: a template of this server's (hutch serve --template), which no tenant builds over", name)
	}
	if b.CPUCount < 0 || b.CPUCount > 64 || b.MemoryMB < 0 || b.MemoryMB > 1<<20 {
		return errorf(daemon.ErrInvalid, "cpuCount %d, memoryMB %d: out of range", b.CPUCount, b.MemoryMB)
	}
	tags := slices.Clone(b.Tags)
	if tag != "" {
		tags = append(tags, tag)
	}
	if len(tags) == 0 {
		tags = []string{defaultTag}
	}
	if len(tags) > maxTags {
		return errorf(daemon.ErrInvalid, "tags: %d, at most %d", len(tags), maxTags)
	}
	for _, t := range tags {
		if err := checkTag("tags", t); err != nil {
			return err
		}
	}
	tags = slices.Compact(slices.Sorted(slices.Values(tags)))
	now := time.Now()
	h.reg.mu.Lock()
	defer h.reg.mu.Unlock()
	t := h.find(tenant, name)
	if t == nil {
		n := 0
		for _, o := range h.reg.byID {
			if o.Tenant == tenant {
				n++
			}
		}
		if n >= maxTemplates {
			return fmt.Errorf("template %s: the tenant has %d templates, the most allowed (delete one first): %w", name, n, daemon.ErrQuota)
		}
		t = &tmpl{ID: newTemplateID(), Tenant: tenant, Name: name, Created: now, Tags: map[string]string{},
			TagTime: map[string]time.Time{}, Uploads: map[string]int64{}, links: map[string]uploadLink{}}
		h.reg.byID[t.ID] = t
	}
	bd := &build{ID: newBuildID(), Status: statusWaiting, CPUCount: b.CPUCount, MemoryMB: b.MemoryMB, Created: now, Updated: now, Want: tags}
	t.Builds = append(t.Builds, bd)
	t.Updated = now
	h.dropOldBuilds(t)
	h.save()
	auditTemplate(r, t.ID+"/"+bd.ID)
	writeJSON(w, http.StatusAccepted, map[string]any{
		"templateID": t.ID, "buildID": bd.ID, "public": false,
		"names": []string{name}, "aliases": []string{name}, "tags": tags,
	})
	return nil
}

// dropOldBuilds drops the oldest finished builds of t that no tag names
// beyond maxBuildsKept, and their snapshots. Under reg.mu.
func (h *Handler) dropOldBuilds(t *tmpl) {
	for len(t.Builds) > maxBuildsKept {
		i := slices.IndexFunc(t.Builds, func(b *build) bool {
			return (b.Status == statusReady || b.Status == statusError) && !slices.Contains(slices.Collect(maps.Values(t.Tags)), b.ID)
		})
		if i < 0 {
			return
		}
		h.dropSnapshot(t.Tenant, t.Builds[i].Snapshot)
		h.dropLogs(t.Builds[i].ID)
		t.Builds = slices.Delete(t.Builds, i, i+1)
	}
}

// dropSnapshot deletes tenant's snapshot sid, if any, in the background
// (the daemon's snapshot calls are not made under reg.mu).
func (h *Handler) dropSnapshot(tenant, sid string) {
	if sid == "" {
		return
	}
	s, ok := h.m.(daemon.Snapshotter)
	if !ok {
		return
	}
	go func() {
		if err := s.DeleteSnapshot(context.Background(), tenant, sid); err != nil && !errors.Is(err, daemon.ErrNotFound) {
			h.log.Warn("delete a template build's snapshot", "snapshot", sid, "err", err)
		}
	}()
}

// auditTemplate records, in the request's audit entry, subject (a
// template, a build or an upload) and no sandbox.
func auditTemplate(r *http.Request, subject string) {
	e := auditEntry(r)
	e.Sandbox, e.Subject = "", subject
}

// templateOfRequest returns the tenant's template the request's {id}
// names, or its not-found error. Under reg.mu.
func (h *Handler) templateOfRequest(r *http.Request, tenant string) (*tmpl, error) {
	id := r.PathValue("id")
	t := h.find(tenant, id)
	if t == nil {
		return nil, errorf(daemon.ErrNotFound, "template %s: not found", id)
	}
	return t, nil
}

// uploadLinkJSON is E2B's TemplateBuildFileUpload.
type uploadLinkJSON struct {
	Present bool   `json:"present"`
	URL     string `json:"url,omitempty"`
}

// fileLink is GET /templates/{id}/files/{hash}: whether the template has
// the COPY archive of that hash already, and if not a link (of this
// server's, with a single-use token) to PUT it to.
func (h *Handler) fileLink(w http.ResponseWriter, r *http.Request, tenant string) error {
	if err := h.templatesOn(); err != nil {
		return err
	}
	hash := r.PathValue("hash")
	if err := checkHash(hash); err != nil {
		return err
	}
	h.reg.mu.Lock()
	defer h.reg.mu.Unlock()
	t, err := h.templateOfRequest(r, tenant)
	if err != nil {
		return err
	}
	now := time.Now()
	maps.DeleteFunc(t.links, func(_ string, l uploadLink) bool { return now.After(l.expires) })
	if len(t.links) >= 256 {
		return fmt.Errorf("template %s: 256 upload links outstanding: %w", t.ID, daemon.ErrQuota)
	}
	tok := randomHex(accessTokenBytes)
	t.links[tok] = uploadLink{hash: hash, expires: now.Add(uploadLinkTTL)}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	url := fmt.Sprintf("%s://%s/templates/%s/files/%s?token=%s", scheme, r.Host, t.ID, hash, tok)
	_, present := t.Uploads[hash]
	writeJSON(w, http.StatusCreated, uploadLinkJSON{Present: present, URL: url})
	return nil
}

// checkHash checks a files hash: E2B's SDKs send a sha256 in hexadecimal.
func checkHash(hash string) error {
	if len(hash) < 8 || len(hash) > 128 || strings.Trim(hash, "0123456789abcdef") != "" {
		return errorf(daemon.ErrInvalid, "files hash %.140q: want lowercase hexadecimal, 8 to 128 digits", hash)
	}
	return nil
}

// uploadPath is where template id's archive hash is kept.
func (h *Handler) uploadPath(id, hash string) string {
	return filepath.Join(h.reg.dir, "uploads", id, hash)
}

// uploadTenant authenticates an upload (PUT /templates/{id}/files/{hash}):
// the SDK sends the link fileLink gave, without its API key; the link's
// token is the credential, good once, for that template and hash only.
func (h *Handler) uploadTenant(r *http.Request) (string, error) {
	tok := r.URL.Query().Get("token")
	h.reg.mu.Lock()
	defer h.reg.mu.Unlock()
	t := h.reg.byID[r.PathValue("id")]
	ok := false
	if t != nil {
		for k, l := range t.links {
			if subtle.ConstantTimeCompare([]byte(k), []byte(tok)) == 1 && l.hash == r.PathValue("hash") && time.Now().Before(l.expires) {
				ok = true
				delete(t.links, k)
			}
		}
	}
	if !ok {
		return "", errorf(ErrUnauthenticated, "upload: no valid upload link (GET /templates/{templateID}/files/{hash} gives one, good once for an hour)")
	}
	return t.Tenant, nil
}

// upload is PUT /templates/{id}/files/{hash}?token=: the COPY archive,
// at most maxUpload bytes, and the tenant's uploads at most
// maxUploadsBytes in all.
func (h *Handler) upload(w http.ResponseWriter, r *http.Request, tenant string) error {
	id, hash := r.PathValue("id"), r.PathValue("hash")
	h.reg.mu.Lock()
	var used int64
	for _, t := range h.reg.byID {
		if t.Tenant == tenant {
			for _, n := range t.Uploads {
				used += n
			}
		}
	}
	h.reg.mu.Unlock()
	limit := min(int64(maxUpload), maxUploadsBytes-used)
	if limit <= 0 {
		return fmt.Errorf("upload: the tenant's uploads hold %d bytes, the most allowed (delete a template first): %w", used, daemon.ErrQuota)
	}
	if r.ContentLength > limit {
		return fmt.Errorf("upload: %d bytes, more than the %d allowed: %w", r.ContentLength, limit, &http.MaxBytesError{Limit: limit})
	}
	dir := filepath.Dir(h.uploadPath(id, hash))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".upload-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	n, err := io.Copy(f, http.MaxBytesReader(w, r.Body, limit))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return fmt.Errorf("upload: more than the %d bytes allowed: %w", limit, err)
	}
	if err != nil {
		return errorf(daemon.ErrInvalid, "upload: read body: %v", err)
	}
	h.reg.mu.Lock()
	defer h.reg.mu.Unlock()
	t := h.reg.byID[id]
	if t == nil || t.Tenant != tenant {
		return errorf(daemon.ErrNotFound, "template %s: deleted during the upload", id)
	}
	if err := os.Rename(f.Name(), h.uploadPath(id, hash)); err != nil {
		return err
	}
	t.Uploads[hash] = n
	h.save()
	auditTemplate(r, id+"/"+hash)
	w.WriteHeader(http.StatusOK)
	return nil
}

// stepJSON is E2B's TemplateStep.
type stepJSON struct {
	Type            string   `json:"type"`
	Args            []string `json:"args"`
	FilesHash       string   `json:"filesHash"`
	Force           bool     `json:"force"`
	ForceUpload     *bool    `json:"forceUpload"`
	ResolveSymlinks *bool    `json:"resolveSymlinks"`
	Gzip            *bool    `json:"gzip"`
}

// startBody is E2B's TemplateBuildStartV2.
type startBody struct {
	FromImage         string          `json:"fromImage"`
	FromTemplate      string          `json:"fromTemplate"`
	FromImageRegistry json.RawMessage `json:"fromImageRegistry"`
	Force             bool            `json:"force"`
	Steps             []stepJSON      `json:"steps"`
	StartCmd          string          `json:"startCmd"`
	ReadyCmd          string          `json:"readyCmd"`
}

// checkSteps checks a build's steps: known types, their arguments, and
// the uploaded archives of COPY steps.
func checkSteps(b *startBody, uploads map[string]int64) error {
	if present(b.FromImageRegistry) {
		return errorf(errUnsupported, "fromImageRegistry: not supported by hutch (builds pull nothing: the operator puts images in the daemon's store)")
	}
	if b.FromImage != "" && b.FromTemplate != "" {
		return errorf(daemon.ErrInvalid, "fromImage and fromTemplate: give one")
	}
	if len(b.Steps) > maxSteps {
		return errorf(daemon.ErrInvalid, "steps: %d, at most %d", len(b.Steps), maxSteps)
	}
	for _, s := range []string{b.StartCmd, b.ReadyCmd, b.FromImage, b.FromTemplate} {
		if len(s) > maxStepArg || strings.IndexByte(s, 0) >= 0 {
			return errorf(daemon.ErrInvalid, "fromImage, fromTemplate, startCmd, readyCmd: at most %d bytes, without NUL", maxStepArg)
		}
	}
	for i, s := range b.Steps {
		where := "steps[" + strconv.Itoa(i) + "]"
		for _, a := range s.Args {
			if len(a) > maxStepArg || strings.IndexByte(a, 0) >= 0 {
				return errorf(daemon.ErrInvalid, "%s: an argument of more than %d bytes or with NUL", where, maxStepArg)
			}
		}
		want := map[string][2]int{"RUN": {1, 2}, "COPY": {2, 4}, "ENV": {2, maxSteps * 2}, "WORKDIR": {1, 1}, "USER": {1, 1}}[s.Type]
		if want == [2]int{} {
			return errorf(daemon.ErrInvalid, "%s: type %q: want RUN, COPY, ENV, WORKDIR or USER", where, s.Type)
		}
		if len(s.Args) < want[0] || len(s.Args) > want[1] || (s.Type == "ENV" && len(s.Args)%2 != 0) {
			return errorf(daemon.ErrInvalid, "%s: %s with %d arguments", where, s.Type, len(s.Args))
		}
		if s.Type == "COPY" {
			if _, ok := uploads[s.FilesHash]; !ok {
				return errorf(daemon.ErrInvalid, "%s: COPY %s: no archive of files hash %.140q was uploaded for this template", where, s.Args[0], s.FilesHash)
			}
		}
	}
	return nil
}

// startBuild is POST /v2/templates/{id}/builds/{buildID}: the build's
// steps, which run in the background from now.
func (h *Handler) startBuild(w http.ResponseWriter, r *http.Request, tenant string) error {
	if err := h.templatesOn(); err != nil {
		return err
	}
	var body startBody
	if err := decode(w, r, &body, false); err != nil {
		return err
	}
	h.reg.mu.Lock()
	defer h.reg.mu.Unlock()
	t, err := h.templateOfRequest(r, tenant)
	if err != nil {
		return err
	}
	bd := t.buildOf(r.PathValue("buildID"))
	if bd == nil {
		return errorf(daemon.ErrNotFound, "template %s: build %s: not found", t.ID, r.PathValue("buildID"))
	}
	if bd.Status != statusWaiting {
		return errorf(daemon.ErrConflict, "template %s: build %s: started already (%s)", t.ID, bd.ID, bd.Status)
	}
	if err := checkSteps(&body, t.Uploads); err != nil {
		return err
	}
	running := 0
	for _, o := range h.reg.byID {
		for _, ob := range o.Builds {
			if o.Tenant == tenant && ob.Status == statusBuilding {
				running++
			}
		}
	}
	if running >= maxBuildsRunning {
		return fmt.Errorf("template %s: the tenant has %d builds running, the most allowed: %w", t.ID, running, daemon.ErrQuota)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), buildTimeout)
	bd.Status, bd.Updated, bd.cancel = statusBuilding, time.Now(), cancel
	h.save()
	job := &buildJob{h: h, tenant: tenant, tmpl: t.ID, name: t.Name, build: bd.ID, body: body, cpuCount: bd.CPUCount, memoryMB: bd.MemoryMB}
	h.reg.build.Add(1)
	go func() {
		defer h.reg.build.Done()
		defer cancel()
		job.run(ctx)
	}()
	auditTemplate(r, t.ID+"/"+bd.ID)
	// A body, which E2B's SDKs parse (an audited answer is flushed,
	// without a Content-Length that says it is empty).
	writeJSON(w, http.StatusAccepted, struct{}{})
	return nil
}

// statusJSON is E2B's TemplateBuildInfo.
type statusJSON struct {
	TemplateID string      `json:"templateID"`
	BuildID    string      `json:"buildID"`
	Status     string      `json:"status"`
	Logs       []string    `json:"logs"`
	LogEntries []logJSON   `json:"logEntries"`
	Reason     *reasonJSON `json:"reason,omitempty"`
}

// levels are E2B's log levels, least severe first.
var levels = []string{"debug", "info", "warn", "error"}

// logQuery reads limit (at most 100, the default) and level (the least
// severe level wanted) of a log request.
func logQuery(r *http.Request) (limit, minLevel int, err error) {
	q := r.URL.Query()
	limit = 100
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 0 || limit > 100 {
			return 0, 0, errorf(daemon.ErrInvalid, "query: limit %q: want 0 to 100", v)
		}
	}
	if v := q.Get("level"); v != "" {
		if minLevel = slices.Index(levels, v); minLevel < 0 {
			return 0, 0, errorf(daemon.ErrInvalid, "query: level %q: want debug, info, warn or error", v)
		}
	}
	return limit, minLevel, nil
}

// buildOfRequest returns the build the request's {id} and {buildID}
// name, under reg.mu.
func (h *Handler) buildOfRequest(r *http.Request, tenant string) (*tmpl, *build, error) {
	t, err := h.templateOfRequest(r, tenant)
	if err != nil {
		return nil, nil, err
	}
	bd := t.buildOf(r.PathValue("buildID"))
	if bd == nil {
		return nil, nil, errorf(daemon.ErrNotFound, "template %s: build %s: not found", t.ID, r.PathValue("buildID"))
	}
	return t, bd, nil
}

// buildStatus is GET /templates/{id}/builds/{buildID}/status?logsOffset=
// &limit=&level=: the build's status and its log entries from logsOffset.
func (h *Handler) buildStatus(w http.ResponseWriter, r *http.Request, tenant string) error {
	limit, minLevel, err := logQuery(r)
	if err != nil {
		return err
	}
	offset := 0
	if v := r.URL.Query().Get("logsOffset"); v != "" {
		if offset, err = strconv.Atoi(v); err != nil || offset < 0 {
			return errorf(daemon.ErrInvalid, "query: logsOffset %q: want a number from 0", v)
		}
	}
	h.reg.mu.Lock()
	defer h.reg.mu.Unlock()
	t, bd, err := h.buildOfRequest(r, tenant)
	if err != nil {
		return err
	}
	out := statusJSON{TemplateID: t.ID, BuildID: bd.ID, Status: bd.Status, Logs: []string{}, LogEntries: []logJSON{}, Reason: bd.Reason}
	for _, e := range bd.logs[min(offset, len(bd.logs)):] {
		if len(out.LogEntries) == limit {
			break
		}
		if slices.Index(levels, e.Level) >= minLevel {
			out.LogEntries = append(out.LogEntries, e)
			out.Logs = append(out.Logs, e.Message)
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// buildLogs is GET /templates/{id}/builds/{buildID}/logs?cursor=&limit=
// &direction=&level=&source=: the build's log entries from cursor (a time
// in milliseconds), forward or backward.
func (h *Handler) buildLogs(w http.ResponseWriter, r *http.Request, tenant string) error {
	limit, minLevel, err := logQuery(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	var cursor int64
	if v := q.Get("cursor"); v != "" {
		if cursor, err = strconv.ParseInt(v, 10, 64); err != nil || cursor < 0 {
			return errorf(daemon.ErrInvalid, "query: cursor %q: want milliseconds since 1970", v)
		}
	}
	dir := q.Get("direction")
	if dir != "" && dir != "forward" && dir != "backward" {
		return errorf(daemon.ErrInvalid, "query: direction %q: want forward or backward", dir)
	}
	if s := q.Get("source"); s != "" && s != "temporary" && s != "persistent" {
		return errorf(daemon.ErrInvalid, "query: source %q: want temporary or persistent", s)
	}
	h.reg.mu.Lock()
	defer h.reg.mu.Unlock()
	_, bd, err := h.buildOfRequest(r, tenant)
	if err != nil {
		return err
	}
	entries := slices.Clone(bd.logs)
	if dir == "backward" {
		slices.Reverse(entries)
	}
	out := []logJSON{}
	for _, e := range entries {
		ms := e.Timestamp.UnixMilli()
		if len(out) == limit {
			break
		}
		if cursor > 0 && ((dir == "backward" && ms > cursor) || (dir != "backward" && ms < cursor)) {
			continue
		}
		if slices.Index(levels, e.Level) >= minLevel {
			out = append(out, e)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"logs": out})
	return nil
}

// templateJSON is E2B's Template (the list's items).
type templateJSON struct {
	TemplateID    string     `json:"templateID"`
	BuildID       string     `json:"buildID"`
	CPUCount      int        `json:"cpuCount"`
	MemoryMB      int        `json:"memoryMB"`
	DiskSizeMB    int        `json:"diskSizeMB"`
	Public        bool       `json:"public"`
	Aliases       []string   `json:"aliases"`
	Names         []string   `json:"names"`
	CreatedAt     time.Time  `json:"createdAt"`
	UpdatedAt     time.Time  `json:"updatedAt"`
	CreatedBy     *struct{}  `json:"createdBy"`
	LastSpawnedAt *time.Time `json:"lastSpawnedAt"`
	SpawnCount    int64      `json:"spawnCount"`
	BuildCount    int        `json:"buildCount"`
	EnvdVersion   string     `json:"envdVersion"`
	BuildStatus   string     `json:"buildStatus"`
}

// listTemplates is GET /templates and GET /v2/templates: the tenant's
// templates, newest first (the daemon's own are not listed: they are
// nobody's).
func (h *Handler) listTemplates(w http.ResponseWriter, r *http.Request, tenant string) error {
	for k := range r.URL.Query() {
		if k != "teamID" && k != "limit" && k != "nextToken" {
			return errorf(daemon.ErrInvalid, "query: unknown parameter %q (teamID, limit, nextToken)", k)
		}
	}
	h.reg.mu.Lock()
	defer h.reg.mu.Unlock()
	out := []templateJSON{}
	for _, t := range h.reg.byID {
		if t.Tenant != tenant {
			continue
		}
		j := templateJSON{TemplateID: t.ID, Aliases: []string{t.Name}, Names: []string{t.Name}, CreatedAt: t.Created,
			UpdatedAt: t.Updated, BuildCount: len(t.Builds), EnvdVersion: EnvdVersion, BuildStatus: statusWaiting}
		if last := t.Builds[len(t.Builds)-1]; last != nil {
			j.BuildStatus, j.CPUCount, j.MemoryMB = last.Status, last.CPUCount, last.MemoryMB
		}
		if bd := t.buildOf(t.Tags[defaultTag]); bd != nil {
			j.BuildID = bd.ID
		}
		out = append(out, j)
	}
	slices.SortFunc(out, func(a, b templateJSON) int { return b.CreatedAt.Compare(a.CreatedAt) })
	writeJSON(w, http.StatusOK, out)
	return nil
}

// buildJSON is E2B's TemplateBuild.
type buildJSON struct {
	BuildID     string     `json:"buildID"`
	Status      string     `json:"status"`
	CreatedAt   time.Time  `json:"createdAt"`
	UpdatedAt   time.Time  `json:"updatedAt"`
	FinishedAt  *time.Time `json:"finishedAt,omitempty"`
	CPUCount    int        `json:"cpuCount"`
	MemoryMB    int        `json:"memoryMB"`
	EnvdVersion string     `json:"envdVersion"`
}

// getTemplate is GET /templates/{id}: the template and its builds, newest
// first.
func (h *Handler) getTemplate(w http.ResponseWriter, r *http.Request, tenant string) error {
	h.reg.mu.Lock()
	defer h.reg.mu.Unlock()
	t, err := h.templateOfRequest(r, tenant)
	if err != nil {
		return err
	}
	builds := []buildJSON{}
	for _, b := range slices.Backward(t.Builds) {
		j := buildJSON{BuildID: b.ID, Status: b.Status, CreatedAt: b.Created, UpdatedAt: b.Updated, CPUCount: b.CPUCount, MemoryMB: b.MemoryMB, EnvdVersion: EnvdVersion}
		if !b.Finished.IsZero() {
			j.FinishedAt = &b.Finished
		}
		builds = append(builds, j)
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"templateID": t.ID, "public": false, "aliases": []string{t.Name}, "names": []string{t.Name},
		"createdAt": t.Created, "updatedAt": t.Updated, "lastSpawnedAt": nil, "spawnCount": 0, "builds": builds,
	})
	return nil
}

// updateTemplate is PATCH /templates/{id} and /v2/templates/{id}
// {public}: a tenant's template is never public (false is accepted).
func (h *Handler) updateTemplate(w http.ResponseWriter, r *http.Request, tenant string) error {
	var b struct {
		Public *bool `json:"public"`
	}
	if err := decode(w, r, &b, false); err != nil {
		return err
	}
	h.reg.mu.Lock()
	defer h.reg.mu.Unlock()
	t, err := h.templateOfRequest(r, tenant)
	if err != nil {
		return err
	}
	if b.Public != nil && *b.Public {
		return errorf(errUnsupported, "public: a template of hutch's is its tenant's alone (no other tenant sees it); the server's public templates are its operator's (hutch serve --template)")
	}
	auditTemplate(r, t.ID)
	writeJSON(w, http.StatusOK, map[string]any{"names": []string{t.Name}})
	return nil
}

// deleteOwnTemplate deletes tenant's template ref names, reporting
// whether there was one: its builds stop, its snapshots and uploads go
// (sandboxes started from it run on).
func (h *Handler) deleteOwnTemplate(tenant, ref string) bool {
	h.reg.mu.Lock()
	defer h.reg.mu.Unlock()
	t := h.find(tenant, ref)
	if t == nil {
		return false
	}
	for _, b := range t.Builds {
		if b.cancel != nil {
			b.cancel()
		}
		h.dropSnapshot(tenant, b.Snapshot)
		h.dropLogs(b.ID)
	}
	delete(h.reg.byID, t.ID)
	if err := os.RemoveAll(filepath.Dir(h.uploadPath(t.ID, "x"))); err != nil {
		h.log.Warn("remove a template's uploads", "template", t.ID, "err", err)
	}
	h.save()
	return true
}

// aliasJSON is E2B's TemplateAliasResponse.
type aliasJSON struct {
	TemplateID string `json:"templateID"`
	Public     bool   `json:"public"`
}

// alias is GET /templates/aliases/{alias}: the template of that name the
// tenant may start from — the daemon's own (public) or its own; another
// tenant's is not found, as one that does not exist.
func (h *Handler) alias(w http.ResponseWriter, r *http.Request, tenant string) error {
	name := r.PathValue("alias")
	if h.daemonTemplate(name) {
		writeJSON(w, http.StatusOK, aliasJSON{TemplateID: name, Public: true})
		return nil
	}
	h.reg.mu.Lock()
	defer h.reg.mu.Unlock()
	for _, t := range h.reg.byID {
		if t.Tenant == tenant && t.Name == name {
			writeJSON(w, http.StatusOK, aliasJSON{TemplateID: t.ID})
			return nil
		}
	}
	return errorf(daemon.ErrNotFound, "template alias %.80q: not found", name)
}

// assignTags is POST /templates/tags {target "name:tag", tags}: the
// target's build gets the tags too.
func (h *Handler) assignTags(w http.ResponseWriter, r *http.Request, tenant string) error {
	var b struct {
		Target string   `json:"target"`
		Tags   []string `json:"tags"`
	}
	if err := decode(w, r, &b, false); err != nil {
		return err
	}
	name, tag, err := splitName("target", b.Target)
	if err != nil {
		return err
	}
	if tag == "" {
		tag = defaultTag
	}
	if len(b.Tags) == 0 {
		return errorf(daemon.ErrInvalid, "tags: none given")
	}
	for _, t := range b.Tags {
		if err := checkTag("tags", t); err != nil {
			return err
		}
	}
	h.reg.mu.Lock()
	defer h.reg.mu.Unlock()
	t := h.find(tenant, name)
	if t == nil {
		return errorf(daemon.ErrNotFound, "template %s: not found", name)
	}
	bd := t.buildOf(t.Tags[tag])
	if bd == nil {
		return errorf(daemon.ErrNotFound, "template %s: no build tagged %q", name, tag)
	}
	tags := slices.Compact(slices.Sorted(slices.Values(b.Tags)))
	added := 0
	for _, tg := range tags {
		if _, ok := t.Tags[tg]; !ok {
			added++
		}
	}
	if len(t.Tags)+added > maxTags {
		return errorf(daemon.ErrInvalid, "tags: template %s would have %d tags, at most %d", name, len(t.Tags)+added, maxTags)
	}
	now := time.Now()
	for _, tg := range tags {
		t.Tags[tg], t.TagTime[tg] = bd.ID, now
	}
	h.save()
	auditTemplate(r, t.ID+"/"+bd.ID)
	writeJSON(w, http.StatusCreated, map[string]any{"tags": tags, "buildID": bd.ID})
	return nil
}

// removeTags is DELETE /templates/tags {name, tags}: the template's tags
// go (its builds stay).
func (h *Handler) removeTags(w http.ResponseWriter, r *http.Request, tenant string) error {
	var b struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}
	if err := decode(w, r, &b, false); err != nil {
		return err
	}
	name, _, err := splitName("name", b.Name)
	if err != nil {
		return err
	}
	h.reg.mu.Lock()
	defer h.reg.mu.Unlock()
	t := h.find(tenant, name)
	if t == nil {
		return errorf(daemon.ErrNotFound, "template %s: not found", name)
	}
	for _, tg := range b.Tags {
		if _, ok := t.Tags[tg]; !ok {
			return errorf(daemon.ErrNotFound, "template %s: no tag %.140q", name, tg)
		}
	}
	for _, tg := range b.Tags {
		delete(t.Tags, tg)
		delete(t.TagTime, tg)
	}
	h.save()
	auditTemplate(r, t.ID)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// tagJSON is E2B's TemplateTag.
type tagJSON struct {
	Tag       string    `json:"tag"`
	BuildID   string    `json:"buildID"`
	CreatedAt time.Time `json:"createdAt"`
}

// listTags is GET /templates/{id}/tags: the template's tags, by name.
func (h *Handler) listTags(w http.ResponseWriter, r *http.Request, tenant string) error {
	if r.PathValue("list") != "tags" {
		return errorf(daemon.ErrNotFound, "%s %s: no such route of E2B's API", r.Method, r.URL.Path)
	}
	h.reg.mu.Lock()
	defer h.reg.mu.Unlock()
	t, err := h.templateOfRequest(r, tenant)
	if err != nil {
		return err
	}
	out := []tagJSON{}
	for _, tg := range slices.Sorted(maps.Keys(t.Tags)) {
		out = append(out, tagJSON{Tag: tg, BuildID: t.Tags[tg], CreatedAt: t.TagTime[tg]})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
