package audit

// A Route is one route of a front end of hutch serve (hutch's API, E2B's
// REST API, envd) and what the audit log records of it. Every front end
// registers its routes from a table of Routes, which it also returns to
// tests, so that a route added without deciding whether it is audited
// cannot be served, and a test can walk them all.
type Route struct {
	// Pattern is the route as net/http's ServeMux writes it: a method
	// and a path ("POST /v1/sandboxes/{id}/exec").
	Pattern string
	// Action is the audit action of a route that changes something
	// ("create", "exec" …); ReadOnly for one that changes nothing, which
	// is not audited.
	Action string
}

// ReadOnly is the Action of a route that changes nothing.
const ReadOnly = "(read-only)"

// Check panics unless r says whether it is audited: its table is wrong,
// which a test of the front end finds at once.
func (r Route) Check() {
	if r.Pattern == "" || r.Action == "" {
		panic("audit: route " + r.Pattern + " says neither its audit action nor that it is read-only")
	}
}
