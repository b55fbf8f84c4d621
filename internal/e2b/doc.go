// Package e2b serves the control plane of E2B's REST API (the part of
// https://api.e2b.dev that E2B's SDKs use for sandboxes) on top of hutch's
// sandbox manager, so that E2B's SDKs work unchanged against `hutch serve`:
// create, connect (which resumes a paused sandbox), get, list (/sandboxes
// and /v2/sandboxes, newest first, with metadata and state filters and
// E2B's X-Next-Token cursors), set the timeout, pause, resume and kill.
// A route of E2B's it does not serve is answered 501 naming it, any other
// path of E2B's API 404.
//
// The API key (X-API-Key) is a hutch token: its tenant owns the sandboxes.
// Every sandbox gets an envd access token, returned by create and connect
// and kept in the handler's memory; Handler.Resolve checks it for the
// requests of E2B's in-sandbox API (envd), which package envd serves.
//
// A sandbox made here has the user "user" (uid and gid 1000, home
// /home/user), which is its working directory, as in E2B's base template.
// With WithDomain, Domain routes E2B's domain layout by host name: api.D
// to the API, 49983-ID.D to envd for sandbox ID, PORT-ID.D to the
// sandbox's port PORT (ServePort: a reverse proxy over an exec of
// port-connect in the sandbox, behind the sandbox's traffic access token
// unless its ports are public).
//
// The mapping of E2B's options onto hutch's policy, and what is refused,
// is documented on CreateBody. Errors become statuses in one function,
// classify; error bodies are E2B's {"code": <status>, "message": ...}.
package e2b
