// Package mcphttp serves hutch's MCP tools (package mcp) over the
// protocol's streamable HTTP transport on hutch serve's listeners, next to
// hutch's own API and E2B's:
//
//   - /mcp: sessions (Mcp-Session-Id), for the clients of every revision
//     of the protocol. A client of the newest revision, which has no
//     sessions, is told so and falls back to an initialize.
//   - /mcp/stateless: no sessions, every POST on its own, for the clients
//     of the newest revision, and for a deployment that spreads requests
//     over several processes.
//   - /mcp/links/TOKEN: what a tool result links to instead of carrying it
//     (a full log, a large file), a capability URL: the token in the path
//     is the only credential it takes.
//
// Every request of /mcp and /mcp/stateless is authenticated as hutch's
// API authenticates (api.Authenticate: a bearer token of a tenant, E2B's
// tokens included; on the unix socket, no token is the operator, and
// processes in another user namespace are refused by api.Serve). The MCP
// server a request reaches is its tenant's: a DaemonBackend bound to
// the tenant, with one exec table per tenant so that a command left
// running outlives the HTTP request and the MCP session that started it.
// A session is bound to the tenant (and listener kind) that made it: the
// session id of another tenant is refused (403), never served.
//
// Against DNS rebinding, a request on a TCP listener must name, in its
// Host header, the address it reached or a name the operator allowed
// (--mcp-allowed-host), and a request with an Origin header must come
// from that same origin; the SDK's own check (a loopback listener
// answers only loopback Host names) stays on. Request bodies are bounded,
// idle sessions end, and a tenant has a bounded number of sessions.
package mcphttp
