package main

import (
	"log/slog"
	"net/http"

	"github.com/hutch-sandbox/hutch/internal/e2b"
	"github.com/hutch-sandbox/hutch/internal/envd"
)

// envdRoutes returns which paths belong to E2B's in-sandbox API (envd) and
// its handler, which serves the sandbox rest resolved for each request
// (and records its calls in the audit log of the e2b handler that
// resolved it, if that has one).
func envdRoutes(log *slog.Logger) (func(string) bool, http.Handler) {
	return envd.Paths, envd.New(func(r *http.Request) (envd.Sandbox, error) {
		s, ok := e2b.Resolved(r)
		if !ok {
			return envd.Sandbox{}, &envd.Error{Code: "unauthenticated", Message: "no sandbox resolved for this request"}
		}
		return s.Envd(), nil
	}, log)
}
