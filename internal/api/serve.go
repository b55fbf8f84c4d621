package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hutch-sandbox/hutch/internal/peercred"
)

// DefaultSocket is the daemon's default unix socket.
const DefaultSocket = "/run/hutch/hutch.sock"

// shutdownGrace is how long Serve lets requests in progress finish once
// its context ended.
const shutdownGrace = 10 * time.Second

// Listen opens the API's listeners: the unix socket at unixPath, when not
// empty, then TCP at tcpAddr, when not empty. The socket is made with mode
// 0660 (its directory is made if missing); a stale socket file is
// replaced, a live one (another daemon) is an error. Closing the unix
// listener removes its file.
func Listen(unixPath, tcpAddr string) ([]net.Listener, error) {
	var ls []net.Listener
	if unixPath != "" {
		l, err := listenUnix(unixPath)
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
	}
	if tcpAddr != "" {
		l, err := net.Listen("tcp", tcpAddr)
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
			return nil, fmt.Errorf("listen on %s: %w", tcpAddr, err)
		}
		ls = append(ls, l)
	}
	if len(ls) == 0 {
		return nil, errors.New("listen: neither a socket nor a TCP address")
	}
	return ls, nil
}

// listenUnix listens on a unix socket at path: it binds a temporary name
// next to it, sets its mode and renames it into place, so that the socket
// is never reachable with a wider mode.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("listen on %s: the file exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("listen on %s: another daemon is listening there", path)
		}
	}
	tmp := filepath.Join(filepath.Dir(path), fmt.Sprintf(".%s.%d", filepath.Base(path), os.Getpid()))
	_ = os.Remove(tmp)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	l.SetUnlinkOnClose(false)
	fail := func(err error) (net.Listener, error) {
		l.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(tmp, 0o660); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return fail(err)
	}
	return &unixListener{UnixListener: l, path: path, file: fi}, nil
}

// unixListener removes its socket file when closed, if it is still its
// own.
type unixListener struct {
	*net.UnixListener
	path string
	file os.FileInfo
	once sync.Once
}

// Addr is the socket's address: its final path, not the name it was bound
// to.
func (l *unixListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

// Close closes the listener and removes its socket.
func (l *unixListener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() {
		if fi, serr := os.Lstat(l.path); serr == nil && os.SameFile(fi, l.file) {
			os.Remove(l.path)
		}
	})
	return err
}

// Serve serves h on every listener until ctx ends or a listener fails,
// then shuts down: it stops accepting, lets requests in progress finish
// for a while, ends the exec streams (their commands are killed) and
// closes the listeners. Requests on a unix listener have OriginLocal,
// others OriginRemote. A connection on a unix listener whose peer is in
// another user namespace than the daemon's — every hutch sandbox is — or
// cannot be placed is refused: each of its requests is answered 403 and
// logged, and h never sees it (see guardPeers). It returns nil after a
// shutdown ctx asked for.
func Serve(ctx context.Context, h http.Handler, log *slog.Logger, ls ...net.Listener) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	srv := &http.Server{
		Handler:           guardPeers(h, log),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return base },
		// HTTP/1.1, and HTTP/2 with prior knowledge (h2c) on listeners
		// without TLS, for gRPC clients of envd: an HTTP/1.1 client is
		// never upgraded. Over TLS the listener's ALPN decides
		// (http/1.1 only: see hutch serve's TLS configuration).
		Protocols: serveProtocols(),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if c.LocalAddr().Network() == "unix" {
				ctx = context.WithValue(ctx, peerKey{}, &peerCheck{conn: c})
				return WithOrigin(ctx, OriginLocal)
			}
			return WithOrigin(ctx, OriginRemote)
		},
	}
	errc := make(chan error, len(ls))
	for _, l := range ls {
		go func() { errc <- srv.Serve(l) }()
	}
	var err error
	running := len(ls)
	select {
	case <-ctx.Done():
	case err = <-errc:
		running--
		err = fmt.Errorf("serve: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if serr := srv.Shutdown(sctx); serr != nil {
		log.Warn("requests still in progress at shutdown", "err", serr)
	}
	cancelBase()
	srv.Close()
	for ; running > 0; running-- {
		<-errc
	}
	return err
}

type peerKey struct{}

// peerCheck is the verdict on the peer of one unix socket connection,
// reached once, at its first request.
type peerCheck struct {
	conn net.Conn
	once sync.Once
	err  error
}

// check returns why the connection's peer is refused, nil if it is not.
func (pc *peerCheck) check() error {
	pc.once.Do(func() {
		sc, ok := pc.conn.(syscall.Conn)
		if !ok {
			pc.err = fmt.Errorf("the connection (%T) has no peer credentials", pc.conn)
			return
		}
		p, err := peercred.Of(sc)
		switch {
		case err != nil:
			pc.err = fmt.Errorf("cannot tell where the peer runs (%v)", err)
		case !p.SameUserNS:
			pc.err = fmt.Errorf("the peer (%s) is in another user namespace than the daemon (a sandbox, or a container with its own user namespace)", p)
		}
	})
	return pc.err
}

// guardPeers answers every request on a unix socket connection whose peer
// is not in the daemon's user namespace with 403 (and closes the
// connection), logging it, before h sees it: a process in a sandbox
// (hutch run's or any other's) that reaches the daemon's socket through
// the file system must not act as its operator. Other requests go to h.
func guardPeers(h http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if pc, ok := r.Context().Value(peerKey{}).(*peerCheck); ok {
			if err := pc.check(); err != nil {
				log.Warn("refused a connection on the unix socket", "reason", err.Error(), "method", r.Method, "path", r.URL.Path)
				w.Header().Set("Connection", "close")
				writeJSON(w, http.StatusForbidden, ErrorBody{
					Code:    CodePermissionDenied,
					Message: "hutch serve refuses this connection: " + err.Error() + "; its unix socket serves only processes in the daemon's own user namespace",
				})
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// serveProtocols are the protocols of Serve's server.
func serveProtocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return p
}
