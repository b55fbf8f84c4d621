package api

import (
	_ "embed"
	"net/http"
)

// openAPIDocument is the OpenAPI 3.0 document of every route; a test
// checks it against the routes registered.
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPI returns the OpenAPI 3.0 document of the API, as JSON.
func OpenAPI() []byte { return append([]byte(nil), openAPIDocument...) }

func (h *handler) openAPI(w http.ResponseWriter, r *http.Request) error {
	if _, err := query(r); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPIDocument)
	return nil
}
