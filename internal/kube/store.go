package kube

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/hutch-sandbox/hutch/internal/store"
)

// Labels of the objects of a Store.
const (
	// LabelKind says what an object of a Store's is: KindSandbox or
	// KindToken.
	LabelKind = "hutch.dev/kind"
	// LabelTenant is the hash of the tenant (tenantHash) a record or a
	// token belongs to: a tenant's name need not be a label's value.
	LabelTenant = "hutch.dev/tenant"
	// LabelState is a sandbox record's state.
	LabelState = "hutch.dev/state"

	KindSandbox = "sandbox"
	KindToken   = "token"
)

const (
	// recordPrefix and tokenPrefix start the names of a Store's
	// ConfigMaps and Secrets.
	recordPrefix = "hutch-rec-"
	tokenPrefix  = "hutch-token-"
	// recordKey is the ConfigMap's key of a sandbox's record.
	recordKey = "record"
	// Keys of a token's Secret.
	tokenTenantKey = "tenant"
	tokenHashKey   = "sha256"
	// maxConfigMap is the most bytes of keys and values a ConfigMap may
	// hold (the API server's limit).
	maxConfigMap = 1 << 20
	// listPage is how many objects a list asks for at once.
	listPage = 500
)

// Store keeps hutch serve's state in the cluster's namespace, where every
// replica of hutch serve finds it: a store.Backend (the package's doc
// describes its objects). It keeps no snapshots. Safe for concurrent use.
//
// In the namespace it needs to get, list, create, update and delete
// ConfigMaps, and to get, list, create and delete Secrets.
type Store struct {
	core   api
	ns     string
	daemon string    // its objects' LabelDaemon: hutch serve's name
	usage  usage     // the quota's counts (usage.go)
	tokens tokenView // the tokens' tenants (tokens.go)
}

var _ store.Backend = (*Store)(nil)

// Store is hutch serve's state in the cluster's namespace.
// Its objects carry the daemon's name (Options.Daemon, LabelDaemon): the
// replicas of one hutch serve share them, another of the namespace sees
// none of them.
func (c *Cluster) Store() *Store { return &Store{core: c.core, ns: c.ns, daemon: c.opts.Daemon} }

// ours reports whether an object of labels is this Store's.
func (s *Store) ours(labels map[string]string) bool {
	return labels[LabelManaged] == "hutch" && labels[LabelDaemon] == s.daemon
}

// tenantHash is the value of LabelTenant for tenant: the hex of the first
// 16 bytes of its SHA-256.
func tenantHash(tenant string) string {
	h := sha256.Sum256([]byte(tenant))
	return hex.EncodeToString(h[:16])
}

// selector is the label selector of a Store's objects of kind, with the
// further requirements more ("key=value", "key!=value").
func (s *Store) selector(kind string, more ...string) string {
	return strings.Join(append([]string{LabelManaged + "=hutch", LabelDaemon + "=" + s.daemon, LabelKind + "=" + kind}, more...), ",")
}

// record is a sandbox's record as its ConfigMap holds it (JSON). Spec and
// Volumes, JSON of their own, are kept as text, byte for byte.
type record struct {
	ID            string            `json:"id"`
	Tenant        string            `json:"tenant"`
	State         string            `json:"state"`
	Labels        map[string]string `json:"labels,omitempty"`
	Spec          string            `json:"spec,omitempty"`
	Created       time.Time         `json:"created,omitzero"`
	Expires       time.Time         `json:"expires,omitzero"`
	LastActive    time.Time         `json:"last_active,omitzero"`
	IdleTimeoutNS int64             `json:"idle_timeout_ns,omitempty"`
	PID           int               `json:"pid,omitempty"`
	PIDStart      uint64            `json:"pid_start,omitempty"`
	Dir           string            `json:"dir,omitempty"`
	Image         string            `json:"image,omitempty"`
	Tier          string            `json:"tier"`
	Checkpoint    string            `json:"checkpoint,omitempty"`
	Volumes       string            `json:"volumes,omitempty"`
	Owner         string            `json:"owner,omitempty"`
	Notes         map[string]string `json:"notes,omitempty"`
}

// recordName is the name of sandbox id's ConfigMap, or an error when id
// cannot be part of one.
func recordName(id string) (string, error) {
	name := recordPrefix + id
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", fmt.Errorf("sandbox id %q cannot name a ConfigMap: %s", id, strings.Join(errs, "; "))
	}
	return name, nil
}

// encode fills cm (its name set) with sb, normalized: its record and its
// labels; its other labels and its annotations are left as they are.
func (s *Store) encode(cm *corev1.ConfigMap, sb store.Sandbox) error {
	if !utf8.Valid(sb.Spec) || !utf8.Valid(sb.Volumes) {
		return errors.New("spec or volumes not valid UTF-8")
	}
	b, err := json.Marshal(record{
		ID: sb.ID, Tenant: sb.Tenant, State: sb.State, Labels: sb.Labels, Spec: string(sb.Spec),
		Created: sb.Created, Expires: sb.Expires, LastActive: sb.LastActive, IdleTimeoutNS: int64(sb.IdleTimeout),
		PID: sb.PID, PIDStart: sb.PIDStart, Dir: sb.Dir, Image: sb.Image, Tier: sb.Tier,
		Checkpoint: sb.Checkpoint, Volumes: string(sb.Volumes), Owner: sb.Owner, Notes: sb.Notes,
	})
	if err != nil {
		return err
	}
	if n := len(recordKey) + len(b); n > maxConfigMap {
		return fmt.Errorf("the record is %d bytes, more than a ConfigMap holds (%d)", n, maxConfigMap)
	}
	cm.Data = map[string]string{recordKey: string(b)}
	// Labels others put on it stay.
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	cm.Labels[LabelManaged] = "hutch"
	cm.Labels[LabelDaemon] = s.daemon
	cm.Labels[LabelKind] = KindSandbox
	cm.Labels[LabelTenant] = tenantHash(sb.Tenant)
	cm.Labels[LabelState] = sb.State
	return nil
}

// decode reads the record of cm, checked and normalized as the SQLite
// store reads its rows back.
func decode(cm *corev1.ConfigMap) (store.Sandbox, error) {
	var r record
	if err := json.Unmarshal([]byte(cm.Data[recordKey]), &r); err != nil {
		return store.Sandbox{}, fmt.Errorf("ConfigMap %s: %w", cm.Name, err)
	}
	sb := store.Sandbox{
		ID: r.ID, Tenant: r.Tenant, State: r.State, Labels: r.Labels, Spec: []byte(r.Spec),
		Created: r.Created, Expires: r.Expires, LastActive: r.LastActive, IdleTimeout: time.Duration(r.IdleTimeoutNS),
		PID: r.PID, PIDStart: r.PIDStart, Dir: r.Dir, Image: r.Image, Tier: r.Tier,
		Checkpoint: r.Checkpoint, Volumes: []byte(r.Volumes), Owner: r.Owner, Notes: r.Notes,
	}
	if cm.Name != recordPrefix+sb.ID {
		return store.Sandbox{}, fmt.Errorf("ConfigMap %s holds the record of sandbox %q", cm.Name, sb.ID)
	}
	if err := store.Normalize(&sb); err != nil {
		return store.Sandbox{}, fmt.Errorf("ConfigMap %s: %w", cm.Name, err)
	}
	return sb, nil
}

// InsertSandbox records a new sandbox as a new ConfigMap; an error wrapping
// store.ErrConflict if one with sb.ID exists.
func (s *Store) InsertSandbox(ctx context.Context, sb store.Sandbox) error {
	cm, err := s.newRecord(sb)
	if err != nil {
		return fmt.Errorf("kubernetes store: insert sandbox %q: %w", sb.ID, err)
	}
	err = s.core.create(ctx, s.ns, "configmaps", cm, &corev1.ConfigMap{})
	if apierrors.IsAlreadyExists(err) {
		err = store.ErrConflict
	}
	if err != nil {
		return fmt.Errorf("kubernetes store: insert sandbox %q: %w", sb.ID, err)
	}
	s.usage.set(sb)
	return nil
}

// newRecord is the ConfigMap of the new sandbox sb.
func (s *Store) newRecord(sb store.Sandbox) (*corev1.ConfigMap, error) {
	if err := store.Normalize(&sb); err != nil {
		return nil, err
	}
	name, err := recordName(sb.ID)
	if err != nil {
		return nil, err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns}}
	return cm, s.encode(cm, sb)
}

// getRecord reads sandbox id's ConfigMap and its record; an error wrapping
// store.ErrNotFound if there is none.
func (s *Store) getRecord(ctx context.Context, id string) (*corev1.ConfigMap, store.Sandbox, error) {
	name, err := recordName(id)
	if err != nil {
		return nil, store.Sandbox{}, store.ErrNotFound // no such record can exist
	}
	cm := &corev1.ConfigMap{}
	if err := s.core.get(ctx, s.ns, "configmaps", name, cm); err != nil {
		if apierrors.IsNotFound(err) {
			err = store.ErrNotFound
		}
		return nil, store.Sandbox{}, err
	}
	if !s.ours(cm.Labels) {
		return nil, store.Sandbox{}, store.ErrNotFound
	}
	sb, err := decode(cm)
	return cm, sb, err
}

// GetSandbox returns the sandbox id of tenant ("" for any tenant); an
// error wrapping store.ErrNotFound if there is none, or it is another
// tenant's.
func (s *Store) GetSandbox(ctx context.Context, tenant, id string) (store.Sandbox, error) {
	_, sb, err := s.getRecord(ctx, id)
	if err == nil && tenant != "" && sb.Tenant != tenant {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("kubernetes store: get sandbox %q: %w", id, err)
	}
	return sb, nil
}

// records lists the sandboxes' records the label selector sel selects,
// page by page.
func (s *Store) records(ctx context.Context, sel string) ([]store.Sandbox, error) {
	var (
		out  []store.Sandbox
		opts = metav1.ListOptions{LabelSelector: sel, Limit: listPage}
	)
	for {
		var l corev1.ConfigMapList
		if err := s.core.list(ctx, s.ns, "configmaps", opts, &l); err != nil {
			return nil, err
		}
		for i := range l.Items {
			sb, err := decode(&l.Items[i])
			if err != nil {
				return nil, err
			}
			out = append(out, sb)
		}
		if l.Continue == "" {
			return out, nil
		}
		opts.Continue = l.Continue
	}
}

// liveRecords lists the records of sandboxes not stopped, tenant's only
// unless tenant is "".
func (s *Store) liveRecords(ctx context.Context, tenant string) ([]store.Sandbox, error) {
	more := []string{LabelState + "!=" + store.StateStopped}
	if tenant != "" {
		more = append(more, LabelTenant+"="+tenantHash(tenant))
	}
	all, err := s.records(ctx, s.selector(KindSandbox, more...))
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(sb store.Sandbox) bool { return tenant != "" && sb.Tenant != tenant }), nil
}

// ListSandboxes returns the sandboxes that f selects, ordered by Created,
// then by ID. The API server selects by the labels of tenant and state;
// the sandboxes' own labels are compared here.
func (s *Store) ListSandboxes(ctx context.Context, f store.Filter) ([]store.Sandbox, error) {
	var more []string
	if f.Tenant != "" {
		more = append(more, LabelTenant+"="+tenantHash(f.Tenant))
	}
	if f.State != "" {
		if !store.ValidState(f.State) {
			return nil, fmt.Errorf("kubernetes store: list sandboxes: invalid state %q", f.State)
		}
		more = append(more, LabelState+"="+f.State)
	}
	all, err := s.records(ctx, s.selector(KindSandbox, more...))
	if err != nil {
		return nil, fmt.Errorf("kubernetes store: list sandboxes: %w", err)
	}
	list := slices.DeleteFunc(all, func(sb store.Sandbox) bool {
		if f.Tenant != "" && sb.Tenant != f.Tenant || f.State != "" && sb.State != f.State {
			return true
		}
		for k, v := range f.Labels {
			if got, ok := sb.Labels[k]; !ok || got != v {
				return true
			}
		}
		return false
	})
	slices.SortFunc(list, func(a, b store.Sandbox) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return list, nil
}

// UpdateSandbox reads the sandbox id, has fn change it (store.Modify) and
// writes it back if its ConfigMap did not change in between (its
// resourceVersion); if it did, it reads it again and runs fn again, so fn
// may run more than once. fn's error aborts, nothing written. It returns
// the sandbox as written, or an error wrapping store.ErrNotFound.
func (s *Store) UpdateSandbox(ctx context.Context, id string, fn func(*store.Sandbox) error) (store.Sandbox, error) {
	for {
		sb, err := s.updateOnce(ctx, id, fn)
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return store.Sandbox{}, fmt.Errorf("kubernetes store: update sandbox %q: %w", id, err)
		}
		return sb, nil
	}
}

// updateOnce is one read, change and write of UpdateSandbox; the write's
// error is a Conflict when the record changed since it was read.
func (s *Store) updateOnce(ctx context.Context, id string, fn func(*store.Sandbox) error) (store.Sandbox, error) {
	if err := ctx.Err(); err != nil {
		return store.Sandbox{}, err
	}
	cm, old, err := s.getRecord(ctx, id)
	if err != nil {
		return store.Sandbox{}, err
	}
	sb, err := store.Modify(old, fn)
	if err != nil {
		return store.Sandbox{}, err
	}
	if err := s.encode(cm, sb); err != nil {
		return store.Sandbox{}, err
	}
	err = s.core.update(ctx, s.ns, "configmaps", cm.Name, cm, &corev1.ConfigMap{})
	if apierrors.IsNotFound(err) {
		err = store.ErrNotFound // deleted since it was read
	}
	if err != nil {
		return store.Sandbox{}, err
	}
	s.usage.set(sb)
	return sb, nil
}

// DeleteSandbox deletes the record of sandbox id; an error wrapping
// store.ErrNotFound if there is none.
func (s *Store) DeleteSandbox(ctx context.Context, id string) error {
	name, err := recordName(id)
	if err == nil {
		err = s.core.delete(ctx, s.ns, "configmaps", name, metav1.DeleteOptions{})
	} else {
		err = store.ErrNotFound
	}
	if apierrors.IsNotFound(err) {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("kubernetes store: delete sandbox %q: %w", id, err)
	}
	s.usage.gone(id)
	return nil
}

// CountSandboxes returns the number of sandboxes of tenant that are not
// stopped; tenant "" counts those of all tenants.
func (s *Store) CountSandboxes(ctx context.Context, tenant string) (int, error) {
	s.startUsage()
	if n, _, ok := s.usage.of(tenant); ok {
		return n, nil
	}
	list, err := s.liveRecords(ctx, tenant)
	if err != nil {
		return 0, fmt.Errorf("kubernetes store: count sandboxes of %q: %w", tenant, err)
	}
	return len(list), nil
}

// CountStates returns the number of sandboxes in each state but stopped,
// by tier, leaving out those of tenant except.
func (s *Store) CountStates(ctx context.Context, except string) (map[store.StateTier]int, error) {
	list, err := s.liveRecords(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("kubernetes store: count sandboxes by state: %w", err)
	}
	out := make(map[store.StateTier]int)
	for _, sb := range list {
		if sb.Tenant != except {
			out[store.StateTier{State: sb.State, Tier: sb.Tier}]++
		}
	}
	return out, nil
}

// MemoryOf returns the sum of the memory limits (resources.memory of their
// policies, in bytes) of tenant's sandboxes that are not stopped.
func (s *Store) MemoryOf(ctx context.Context, tenant string) (int64, error) {
	s.startUsage()
	if _, mem, ok := s.usage.of(tenant); ok {
		return mem, nil
	}
	list, err := s.liveRecords(ctx, tenant)
	if err != nil {
		return 0, fmt.Errorf("kubernetes store: memory of %q: %w", tenant, err)
	}
	var sum int64
	for _, sb := range list {
		sum += memoryLimit(sb.Spec)
	}
	return sum, nil
}

// memoryLimit is resources.memory of spec, a policy (JSON); 0 when it has
// none.
func memoryLimit(spec []byte) int64 {
	var p struct {
		Resources struct {
			Memory json.Number `json:"memory"`
		} `json:"resources"`
	}
	if json.Unmarshal(spec, &p) != nil {
		return 0
	}
	if n, err := p.Resources.Memory.Int64(); err == nil {
		return n
	}
	f, _ := strconv.ParseFloat(string(p.Resources.Memory), 64)
	return int64(f)
}

// errNoSnapshots is every snapshot method's error but ListSnapshots'.
var errNoSnapshots = fmt.Errorf("hutch serve on Kubernetes keeps no snapshots: %w", store.ErrUnsupported)

// InsertSnapshot refuses: snapshots are not kept on Kubernetes.
func (s *Store) InsertSnapshot(context.Context, store.Snapshot) error {
	return fmt.Errorf("kubernetes store: insert snapshot: %w", errNoSnapshots)
}

// GetSnapshot refuses: snapshots are not kept on Kubernetes.
func (s *Store) GetSnapshot(_ context.Context, _, id string) (store.Snapshot, error) {
	return store.Snapshot{}, fmt.Errorf("kubernetes store: snapshot %q: %w", id, errNoSnapshots)
}

// ListSnapshots lists none: snapshots are not kept on Kubernetes (the
// daemon lists its snapshots as it starts).
func (s *Store) ListSnapshots(context.Context, string, bool) ([]store.Snapshot, error) {
	return nil, nil
}

// MarkSnapshotDeleted refuses: snapshots are not kept on Kubernetes.
func (s *Store) MarkSnapshotDeleted(_ context.Context, _, id string) error {
	return fmt.Errorf("kubernetes store: delete snapshot %q: %w", id, errNoSnapshots)
}

// RemoveSnapshot refuses: snapshots are not kept on Kubernetes.
func (s *Store) RemoveSnapshot(_ context.Context, id string) error {
	return fmt.Errorf("kubernetes store: remove snapshot %q: %w", id, errNoSnapshots)
}

// tokenName is the name of the Secret of the token whose SHA-256 is hash.
func tokenName(hash []byte) string { return tokenPrefix + hex.EncodeToString(hash[:20]) }

// CreateToken makes a new API token for tenant (store.MakeToken) and
// returns it; the cluster keeps only its SHA-256.
func (s *Store) CreateToken(ctx context.Context, tenant string) (string, error) {
	return s.createToken(ctx, tenant, store.MakeToken)
}

// CreateE2BToken makes a new API token for tenant shaped as an E2B API key
// (store.MakeE2BToken) and returns it.
func (s *Store) CreateE2BToken(ctx context.Context, tenant string) (string, error) {
	return s.createToken(ctx, tenant, store.MakeE2BToken)
}

// createToken records a token newToken makes, by its hash, as tenant's: a
// new Secret.
func (s *Store) createToken(ctx context.Context, tenant string, newToken func() (string, error)) (string, error) {
	if err := store.CheckTokenOwner(tenant); err != nil {
		return "", fmt.Errorf("kubernetes store: create token: %w", err)
	}
	token, err := newToken()
	if err != nil {
		return "", fmt.Errorf("kubernetes store: create token for %q: %w", tenant, err)
	}
	hash := store.TokenHash(token)
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: tokenName(hash), Namespace: s.ns, Labels: map[string]string{
			LabelManaged: "hutch",
			LabelDaemon:  s.daemon,
			LabelKind:    KindToken,
			LabelTenant:  tenantHash(tenant),
		}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			tokenTenantKey: []byte(tenant),
			tokenHashKey:   []byte(hex.EncodeToString(hash)),
		},
	}
	if err := s.core.create(ctx, s.ns, "secrets", sec, &corev1.Secret{}); err != nil {
		return "", fmt.Errorf("kubernetes store: create token for %q: %w", tenant, err)
	}
	s.tokens.set(sec)
	return token, nil
}

// TenantForToken returns the tenant that token belongs to, or an error
// wrapping store.ErrNotFound if it is not a live token: from the view of
// the tokens (tokens.go) when it is current, else from its Secret, found by a
// part of the token's SHA-256, the whole hash compared in constant time.
func (s *Store) TenantForToken(ctx context.Context, token string) (string, error) {
	if !store.WellFormedToken(token) {
		return "", fmt.Errorf("kubernetes store: token: %w", store.ErrNotFound)
	}
	hash := store.TokenHash(token)
	tenant, has, known := s.viewTenant(ctx, hash)
	if has {
		return tenant, nil
	}
	if known {
		return "", fmt.Errorf("kubernetes store: token: %w", store.ErrNotFound)
	}
	var sec corev1.Secret
	if err := s.core.get(ctx, s.ns, "secrets", tokenName(hash), &sec); err != nil {
		if apierrors.IsNotFound(err) {
			err = store.ErrNotFound
		}
		return "", fmt.Errorf("kubernetes store: token: %w", err)
	}
	want := []byte(hex.EncodeToString(hash))
	tenant = string(sec.Data[tokenTenantKey])
	if subtle.ConstantTimeCompare(sec.Data[tokenHashKey], want) != 1 || tenant == "" || !s.ours(sec.Labels) {
		return "", fmt.Errorf("kubernetes store: token: %w", store.ErrNotFound)
	}
	if tenant == store.SocketTenant {
		return "", fmt.Errorf("kubernetes store: token of the reserved tenant %q: %w", tenant, store.ErrNotFound)
	}
	return tenant, nil
}

// RevokeTokens deletes every token of tenant and returns how many there
// were (those another replica deleted meanwhile not counted).
func (s *Store) RevokeTokens(ctx context.Context, tenant string) (int, error) {
	opts := metav1.ListOptions{LabelSelector: s.selector(KindToken, LabelTenant+"="+tenantHash(tenant)), Limit: listPage}
	n := 0
	for {
		var l corev1.SecretList
		if err := s.core.list(ctx, s.ns, "secrets", opts, &l); err != nil {
			return n, fmt.Errorf("kubernetes store: revoke tokens of %q: %w", tenant, err)
		}
		for _, sec := range l.Items {
			if string(sec.Data[tokenTenantKey]) != tenant {
				continue
			}
			err := s.core.delete(ctx, s.ns, "secrets", sec.Name, metav1.DeleteOptions{})
			s.tokens.drop(string(sec.Data[tokenHashKey]))
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return n, fmt.Errorf("kubernetes store: revoke tokens of %q: %w", tenant, err)
			}
			n++
		}
		if l.Continue == "" {
			return n, nil
		}
		opts.Continue = l.Continue
	}
}

// Close releases nothing: the state is the cluster's.
func (s *Store) Close() error {
	s.closeUsage()
	return nil
}
