package webui

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Bounds of failed logins.
const (
	// loginBurst is how many failed logins a client address may make at
	// once.
	loginBurst = 10
	// loginEvery is how often it may make one more after those.
	loginEvery = 6 * time.Second
	// maxClients bounds the addresses whose failures are counted; past
	// it, the addresses beyond share one count.
	maxClients = 4096
)

// limiter counts failed logins per client address. A token is 32 random
// bytes, which no rate of guesses finds; the limit keeps a guesser from
// spending the daemon's time and filling its log.
type limiter struct {
	mu      sync.Mutex
	clients map[netip.Prefix]*rate.Limiter
	rest    *rate.Limiter // the addresses past maxClients
}

func newLimiter() *limiter {
	return &limiter{clients: map[netip.Prefix]*rate.Limiter{}, rest: rate.NewLimiter(rate.Every(loginEvery), loginBurst)}
}

// clientKey is who r comes from: its address, an IPv6 address's /64 (one
// host's), the zero prefix for the unix socket.
func clientKey(r *http.Request) netip.Prefix {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return netip.Prefix{}
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Prefix{}
	}
	a = a.Unmap()
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p
}

// get is the count of client, made if missing (the caller holds mu).
func (l *limiter) get(client netip.Prefix, make bool) *rate.Limiter {
	if c := l.clients[client]; c != nil {
		return c
	}
	if !make {
		return nil
	}
	if len(l.clients) >= maxClients {
		now := time.Now()
		for k, c := range l.clients {
			if c.TokensAt(now) >= loginBurst {
				delete(l.clients, k) // it failed long enough ago
			}
		}
		if len(l.clients) >= maxClients {
			return l.rest
		}
	}
	c := rate.NewLimiter(rate.Every(loginEvery), loginBurst)
	l.clients[client] = c
	return c
}

// allowed reports whether client may try a token now.
func (l *limiter) allowed(client netip.Prefix) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.get(client, false)
	if c == nil && len(l.clients) >= maxClients {
		c = l.rest
	}
	return c == nil || c.Tokens() >= 1
}

// failed counts a failed login of client.
func (l *limiter) failed(client netip.Prefix) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.get(client, true).Allow()
}
