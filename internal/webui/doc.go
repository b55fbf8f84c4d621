// Package webui serves hutch serve's review pages at /ui/: a tenant's
// sandboxes with their state, events and egress refusals, the diff of a
// sandbox against its base or a snapshot, the change sets of sandboxes
// bound to a host workspace, side by side, with Apply and Discard, and
// the approvals its sandboxes wait on.
//
// # Approvals
//
// A command, host or change set a sandbox's approval rules hold (a
// policy's approvals:, network.on_unknown: ask) waits for an answer. The
// header counts the tenant's waiting questions on every page; the
// approvals page (#/approvals) lists them all, a sandbox's page its own:
// each with its kind, what it is about (the whole command line), the
// simple command asked about, the rule and the reason, and the time left
// before it is refused, and the buttons Allow once, Allow for this
// sandbox, Always (for the sandbox's life: on hutch serve there is no
// policy file to write it to) and Deny, which POST the answer to
// /v1/approvals/{id}. The pages poll GET /v1/approvals every two seconds,
// and a sandbox's page also at its approval events; a question answered
// (here or elsewhere: the API, an MCP client's elicitation) or expired
// leaves them.
//
// Everything is in the binary (package embed): a few plain HTML, CSS and
// JavaScript files written for hutch, no framework, nothing fetched from
// another origin. The pages read the API with the browser's fetch at
// /ui/v1/..., which the handler passes to hutch's API as /v1/...
//
// # Credentials
//
// GET /ui/ shows a login form that takes a hutch token (hutch token
// create); POST /ui/login checks it exactly as the API does
// (api.TenantForToken) and keeps it in an HttpOnly, SameSite=Strict
// cookie of Path=/ui (api.UICookie; Secure when the request came over TLS
// or Config.Secure says a TLS proxy is in front), for Config.Lifetime;
// POST /ui/logout clears it. Failed logins are limited per client
// address. The API takes the cookie instead of a bearer token only from a
// request that carries api.UIHeader, which the pages' script sets and
// another site's page cannot without a CORS preflight the daemon never
// grants, and that the browser marks as same-origin
// (api.CheckUIRequest): the classic defence against cross-site request
// forgery, on top of SameSite=Strict.
//
// Every request under /ui/ on a TCP listener must name in its Host the
// address it reached or a name the daemon answers to (api.Hosts), against
// DNS rebinding, as /mcp's. Every answer forbids framing and inline
// script (Content-Security-Policy: default-src 'self', frame-ancestors
// 'none'); the pages put what comes from a sandbox — file names, file
// contents, events — into the document as text only, never as markup.
package webui
