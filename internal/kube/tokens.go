package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/hutch-sandbox/hutch/internal/store"
)

// tokenView is every token's tenant by its hash, fed by a watch of the
// tokens' Secrets and by the Store's own writes: a request's token is
// looked up here instead of a read of its Secret from the API server per
// request. A token not in it (made by another replica a moment ago, or
// not a token) is read from the API server; one revoked is gone from it
// within the watch's delay.
type tokenView struct {
	watched
	m map[string]string // hex of the hash → tenant
}

// lookup is the tenant of the token of hash, if the view has it.
func (v *tokenView) lookup(hash []byte) (string, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.synced {
		return "", false
	}
	t, ok := v.m[hex.EncodeToString(hash)]
	return t, ok
}

// set records a token's Secret; drop removes hash.
func (v *tokenView) set(sec *corev1.Secret) {
	hash, tenant := string(sec.Data[tokenHashKey]), string(sec.Data[tokenTenantKey])
	if tenant == "" || !tokenSecret(sec) {
		return
	}
	v.mu.Lock()
	if v.m != nil {
		v.m[hash] = tenant
	}
	v.mu.Unlock()
}

func (v *tokenView) drop(hash string) {
	v.mu.Lock()
	delete(v.m, hash)
	v.mu.Unlock()
}

// tokenSecret reports whether sec is a token's Secret as CreateToken
// writes it: named after the hash it holds.
func tokenSecret(sec *corev1.Secret) bool {
	b, err := hex.DecodeString(string(sec.Data[tokenHashKey]))
	return err == nil && len(b) == sha256.Size && tokenName(b) == sec.Name
}

// startTokens fills the token view and keeps it current, once, until
// close.
func (s *Store) startTokens() {
	v := &s.tokens
	v.start(func(stop chan struct{}) {
		follow(s.core, s.ns, stop, "secrets", s.selector(KindToken), func() runtime.Object { return &corev1.SecretList{} },
			func(list runtime.Object) {
				m := map[string]string{}
				for _, sec := range list.(*corev1.SecretList).Items {
					if t := string(sec.Data[tokenTenantKey]); t != "" && s.ours(sec.Labels) && tokenSecret(&sec) {
						m[string(sec.Data[tokenHashKey])] = t
					}
				}
				v.mu.Lock()
				v.m, v.synced = m, true
				v.mu.Unlock()
			},
			func(t watch.EventType, obj runtime.Object) {
				sec, ok := obj.(*corev1.Secret)
				if !ok || !s.ours(sec.Labels) {
					return
				}
				if t == watch.Deleted {
					v.drop(string(sec.Data[tokenHashKey]))
				} else {
					v.set(sec)
				}
			}, v.lost)
	})
}

// viewTenant is the tenant of the token of hash as the view has it,
// having waited up to viewGrace for a token it lacks (made a moment ago by
// another replica): known is true when the view tells (has is then
// whether it has the token), false when it cannot (not filled yet, or
// its watch ended and it is being filled again) and the Secret must be
// read. A token nobody made costs the API server nothing.
func (s *Store) viewTenant(ctx context.Context, hash []byte) (tenant string, has, known bool) {
	s.startTokens()
	v := &s.tokens
	has, known = await(ctx, func() (bool, bool) {
		v.mu.Lock()
		defer v.mu.Unlock()
		var ok bool
		tenant, ok = v.m[hex.EncodeToString(hash)]
		return ok && v.synced, v.synced
	})
	if tenant == store.SocketTenant {
		// Never a token's (the socket's operator): read, and refused.
		return "", false, false
	}
	return tenant, has, known
}
