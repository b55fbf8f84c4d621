package e2b

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hutch-sandbox/hutch/internal/daemon"
)

// SecretsFile is the file, in the daemon's state directory, that holds
// the tenants' E2B secrets (0600, root's, like the rest of the directory):
// their values too, which no answer carries.
const SecretsFile = "e2b-secrets.json"

// Bounds of the secrets API (E2B's, where its description gives them).
const (
	maxSecretName      = 128
	maxSecretValue     = 64 << 10
	maxSecretsOfTenant = 100
	maxSecretMetaKeys  = 32
	maxSecretMetaKey   = 128
	maxSecretMetaValue = 1024
	maxSecretMetaTotal = 8192
	secretIDPrefix     = "sec_"
)

var secretNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// storedSecret is one secret as the file keeps it. Only its current
// version's value is kept: no reader of hutch names an older one.
type storedSecret struct {
	ID       string            `json:"id"`
	Name     string            `json:"name"`
	Version  int64             `json:"version"`
	Value    string            `json:"value"`
	Metadata map[string]string `json:"metadata"`
	Created  time.Time         `json:"created"`
	Updated  time.Time         `json:"updated"`
}

// secretJSON is E2B's Secret: metadata only, never the value.
type secretJSON struct {
	SecretID       string            `json:"secretID"`
	Name           string            `json:"name"`
	CurrentVersion int64             `json:"currentVersion"`
	Metadata       map[string]string `json:"metadata"`
	CreatedAt      time.Time         `json:"createdAt"`
	UpdatedAt      time.Time         `json:"updatedAt"`
}

func (s *storedSecret) info() secretJSON {
	return secretJSON{SecretID: s.ID, Name: s.Name, CurrentVersion: s.Version, Metadata: s.Metadata, CreatedAt: s.Created, UpdatedAt: s.Updated}
}

// secretStore keeps every tenant's secrets in one file, rewritten whole
// (a temporary file renamed over it) on each change.
type secretStore struct {
	path string
	mu   sync.Mutex
}

// WithStateDir gives the handler the daemon's state directory, where it
// keeps E2B's secrets (SecretsFile); without it the secrets API answers
// 501.
func WithStateDir(dir string) Option {
	return func(h *Handler) { h.secrets = &secretStore{path: filepath.Join(dir, SecretsFile)} }
}

// load reads the file: tenant → its secrets, oldest first.
func (st *secretStore) load() (map[string][]*storedSecret, error) {
	b, err := os.ReadFile(st.path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string][]*storedSecret{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	m := map[string][]*storedSecret{}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("secrets: %s: %w", st.path, err)
	}
	return m, nil
}

func (st *secretStore) save(m map[string][]*storedSecret) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	tmp := st.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	if err := os.Rename(tmp, st.path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("secrets: %w", err)
	}
	return nil
}

// change runs fn on tenant's secrets under the lock and saves what it
// left, unless it failed.
func (st *secretStore) change(tenant string, fn func([]*storedSecret) ([]*storedSecret, error)) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	m, err := st.load()
	if err != nil {
		return err
	}
	list, err := fn(m[tenant])
	if err != nil {
		return err
	}
	if len(list) == 0 {
		delete(m, tenant)
	} else {
		m[tenant] = list
	}
	return st.save(m)
}

// list returns tenant's secrets, oldest first.
func (st *secretStore) list(tenant string) ([]*storedSecret, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	m, err := st.load()
	if err != nil {
		return nil, err
	}
	return m[tenant], nil
}

// find returns the index of the secret ref names (its id, or its name in
// any case), -1 if none.
func findSecret(list []*storedSecret, ref string) int {
	return slices.IndexFunc(list, func(s *storedSecret) bool { return s.ID == ref || s.Name == strings.ToLower(ref) })
}

func (h *Handler) secretStore() (*secretStore, error) {
	if h.secrets == nil {
		return nil, errorf(errNoRoute, "E2B's secrets are not supported by this handler (no state directory)")
	}
	return h.secrets, nil
}

// checkSecretMetadata applies E2B's bounds of a secret's metadata.
func checkSecretMetadata(md map[string]string) error {
	if len(md) > maxSecretMetaKeys {
		return errorf(daemon.ErrInvalid, "metadata: %d entries, at most %d", len(md), maxSecretMetaKeys)
	}
	total := 0
	for k, v := range md {
		if k == "" || len(k) > maxSecretMetaKey {
			return errorf(daemon.ErrInvalid, "metadata: key %.40q: want 1 to %d bytes", k, maxSecretMetaKey)
		}
		if len(v) > maxSecretMetaValue {
			return errorf(daemon.ErrInvalid, "metadata: value of %q: %d bytes, at most %d", k, len(v), maxSecretMetaValue)
		}
		total += len(k) + len(v)
	}
	if total > maxSecretMetaTotal {
		return errorf(daemon.ErrInvalid, "metadata: %d bytes in all, at most %d", total, maxSecretMetaTotal)
	}
	return nil
}

func checkSecretValue(v *string) error {
	if v == nil {
		return errorf(daemon.ErrInvalid, "body: value is required")
	}
	if len(*v) > maxSecretValue {
		return errorf(daemon.ErrInvalid, "value: %d bytes, at most %d", len(*v), maxSecretValue)
	}
	return nil
}

// createSecret is POST /secrets {name, value, metadata}: 201 with the
// secret's metadata (never its value); a name the tenant has is 409.
func (h *Handler) createSecret(w http.ResponseWriter, r *http.Request, tenant string) error {
	st, err := h.secretStore()
	if err != nil {
		return err
	}
	var body struct {
		Name     string            `json:"name"`
		Value    *string           `json:"value"`
		Metadata map[string]string `json:"metadata"`
	}
	if err := decode(w, r, &body, false); err != nil {
		return err
	}
	name := strings.ToLower(body.Name)
	switch {
	case name == "" || len(name) > maxSecretName || !secretNameRE.MatchString(name):
		return errorf(daemon.ErrInvalid, "name %.140q: want 1 to %d letters, digits, '_' or '-'", body.Name, maxSecretName)
	case strings.HasPrefix(name, secretIDPrefix):
		return errorf(daemon.ErrInvalid, "name %q: the prefix %s is reserved for secret ids", body.Name, secretIDPrefix)
	}
	if err := checkSecretValue(body.Value); err != nil {
		return err
	}
	if err := checkSecretMetadata(body.Metadata); err != nil {
		return err
	}
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	now := time.Now().UTC()
	s := &storedSecret{ID: secretIDPrefix + hex.EncodeToString(b[:]), Name: name, Version: 1, Value: *body.Value,
		Metadata: body.Metadata, Created: now, Updated: now}
	if s.Metadata == nil {
		s.Metadata = map[string]string{}
	}
	err = st.change(tenant, func(list []*storedSecret) ([]*storedSecret, error) {
		if findSecret(list, name) >= 0 {
			return nil, errorf(daemon.ErrConflict, "secret %q exists", name)
		}
		if len(list) >= maxSecretsOfTenant {
			return nil, errorf(daemon.ErrQuota, "a tenant may keep at most %d secrets", maxSecretsOfTenant)
		}
		return append(list, s), nil
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, s.info())
	return nil
}

// listSecrets is GET /secrets?limit=&nextToken=: the tenant's secrets,
// oldest first, in pages (X-Next-Token).
func (h *Handler) listSecrets(w http.ResponseWriter, r *http.Request, tenant string) error {
	st, err := h.secretStore()
	if err != nil {
		return err
	}
	limit, after, err := pageQuery(r.URL.Query(), secretIDPrefix)
	if err != nil {
		return err
	}
	list, err := st.list(tenant)
	if err != nil {
		return err
	}
	if after != "" {
		i := findSecret(list, after)
		list = list[i+1:] // none: from the start (i is -1)
	}
	out := []secretJSON{}
	for _, s := range list {
		if len(out) == limit {
			setNextToken(w, out[len(out)-1].SecretID)
			break
		}
		out = append(out, s.info())
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getSecret is GET /secrets/{id}, by id or name.
func (h *Handler) getSecret(w http.ResponseWriter, r *http.Request, tenant string) error {
	st, err := h.secretStore()
	if err != nil {
		return err
	}
	list, err := st.list(tenant)
	if err != nil {
		return err
	}
	i := findSecret(list, r.PathValue("id"))
	if i < 0 {
		return errorf(daemon.ErrNotFound, "secret %.140q not found", r.PathValue("id"))
	}
	writeJSON(w, http.StatusOK, list[i].info())
	return nil
}

// updateSecret is POST /secrets/{id} {value, metadata}: the value's next
// version (the previous one is dropped), and the metadata replaced when
// given.
func (h *Handler) updateSecret(w http.ResponseWriter, r *http.Request, tenant string) error {
	st, err := h.secretStore()
	if err != nil {
		return err
	}
	var body struct {
		Value    *string           `json:"value"`
		Metadata map[string]string `json:"metadata"`
	}
	if err := decode(w, r, &body, false); err != nil {
		return err
	}
	if err := checkSecretValue(body.Value); err != nil {
		return err
	}
	if err := checkSecretMetadata(body.Metadata); err != nil {
		return err
	}
	var out secretJSON
	err = st.change(tenant, func(list []*storedSecret) ([]*storedSecret, error) {
		i := findSecret(list, r.PathValue("id"))
		if i < 0 {
			return nil, errorf(daemon.ErrNotFound, "secret %.140q not found", r.PathValue("id"))
		}
		s := list[i]
		s.Value, s.Version, s.Updated = *body.Value, s.Version+1, time.Now().UTC()
		if body.Metadata != nil {
			s.Metadata = body.Metadata
		}
		out = s.info()
		return list, nil
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// deleteSecret is DELETE /secrets/{id}: 204, its value gone from the file.
func (h *Handler) deleteSecret(w http.ResponseWriter, r *http.Request, tenant string) error {
	st, err := h.secretStore()
	if err != nil {
		return err
	}
	err = st.change(tenant, func(list []*storedSecret) ([]*storedSecret, error) {
		i := findSecret(list, r.PathValue("id"))
		if i < 0 {
			return nil, errorf(daemon.ErrNotFound, "secret %.140q not found", r.PathValue("id"))
		}
		return slices.Delete(list, i, i+1), nil
	})
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
