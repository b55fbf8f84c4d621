// Package api puts hutch's daemon (package daemon) on HTTP: the handlers of
// `hutch serve`, its listeners, and the OpenAPI document that describes
// them.
//
// # Listeners and tenants
//
// Serve listens on a unix socket (mode 0660; /run/hutch/hutch.sock by
// default) and, optionally, on TCP. The listener a request came through is
// its Origin. On the unix socket a request without an Authorization header
// acts as the tenant "admin": whoever may open the socket is trusted as the
// machine's operator. On TCP every request must carry
// "Authorization: Bearer TOKEN" with a token made by `hutch token create`,
// and acts as the token's tenant; anything else is 401. A tenant sees only
// its own sandboxes: another tenant's are 404, exactly like missing ones.
//
// The review pages (package webui) reach the API with the token kept in
// their login cookie (UICookie) instead of the header: it is taken only
// from a request without an Authorization header that carries UIHeader
// and comes from the daemon's own origin (CheckUIRequest), else 403, so
// that a page of another site cannot act with a browser's cookie.
//
// A tenant that came over TCP may not ask for a policy that reaches into the
// host: a custom root, extra writable or readable host paths, dropping the
// default deny lists, the host's network, private addresses, secrets (their
// values come from the daemon's own environment or files), passing the
// daemon's environment, or best-effort isolation. Such a request is 403.
//
// # Errors
//
// Every error is a JSON body {"code": ..., "message": ...} with a status
// that follows from the code, decided in one function (classify):
//
//	invalid             400  a malformed request: bad JSON, an unknown field, a bad path or value
//	unauthorized        401  no token on TCP, or a token that is not valid
//	permission_denied   403  the sandbox may not do that (file permissions, a read-only path), or a policy a remote tenant may not ask for
//	not_found           404  no such sandbox (for this tenant), route, file, command or process
//	method_not_allowed  405  the route exists for other methods (see the Allow header)
//	conflict            409  the sandbox's state does not allow it, it has ended, or a file exists
//	too_large           413  a body over its limit (1 MiB of JSON, Config.MaxUpload of files and archives)
//	quota               429  the tenant has as many sandboxes as it may have: retry after destroying one
//	internal            500  anything else
//	unavailable         503  the daemon is shutting down
//
// Quota is 429, not 403: the request is right and the tenant may make it
// again once it has fewer sandboxes.
//
// JSON bodies are at most 1 MiB; unknown fields are refused, naming the
// field, as are unknown query parameters.
//
// # Exec
//
// POST /v1/sandboxes/{id}/exec runs a command in two ways. Without an
// Upgrade header it runs the command to completion and answers with its
// output (each stream capped at Config.MaxOutput, then "truncated": true)
// and exit status; an output that is not valid UTF-8 comes base64-encoded in
// stdout_b64 or stderr_b64 instead of stdout or stderr. With
// "Connection: Upgrade" and "Upgrade: hutch-exec/1" the daemon starts the
// command, answers 101 Switching Protocols with the command's pid in the
// Hutch-Pid header, and the connection then carries the framed duplex
// stream of package execproto: stdin, its end, stdout, stderr, terminal
// resizes, signals, and finally the exit status or an error. Errors found
// before the command started (a bad request, a missing sandbox or command)
// are ordinary HTTP errors in both modes.
//
// Once a command ended, its output may still be held open by a process it
// left in the background; the daemon stops waiting for it once it has been
// idle for OutputGrace, sends the result, and drains the rest.
//
// # Files
//
// Paths are absolute paths in the sandbox, without ".." elements; the
// sandbox's agent resolves them in the sandbox's own view (a symlink the
// sandbox made never leads to a host file). Files are read and written as
// raw bodies, streamed; a write replaces the file atomically. Archives are
// tar streams: a download walks a directory without following symlinks
// (they are archived as symlinks); an upload refuses entries with absolute
// names or ".." elements, entries that pass through a symlink the archive
// itself made, and links whose targets lie outside the directory. Entries
// before a refused one stay written. Every write goes through the agent.
//
// # Code interpreter
//
// A sandbox of an image with Jupyter kernels runs a code interpreter
// (package interp), which POST /v1/sandboxes/{id}/code reaches: code, and
// the language or the context to run it in, and variables for this
// execution only; the answer is NDJSON, the interpreter's events relayed
// as they come (output, results, the exception, keepalives, and
// end_of_execution last: an answer without it broke off). The client
// going away interrupts the execution. /code/contexts lists, creates,
// restarts and removes its contexts. A sandbox without kernels is refused
// with 409 no_interpreter; an execution is a code.executed event.
//
// # Events
//
// GET /v1/sandboxes/{id}/events?since=N streams a sandbox's events as
// NDJSON (application/x-ndjson), one daemon.Event a line, each flushed as
// it comes: the daemon keeps a sandbox's last 1000 events, replays those
// numbered above since, then follows new ones until the sandbox ended
// (the stream ends after its "ended" event) or the client goes away. A
// reader that falls behind gets a "dropped" event counting what it
// missed. The events of an ended sandbox are kept for 5 minutes. Events
// carry no secret values and no file contents.
//
// # Metrics
//
// GET /metrics answers with the daemon's metrics in the Prometheus text
// format (package metrics), behind the same authentication as every other
// route: the number of sandboxes by state and isolation tier (computed at
// each scrape), the sandboxes created by tier, the durations of creations
// and of commands, the requests by route pattern
// and status, and the egress proxies' refusals and relayed bytes (the
// bytes counted when a sandbox ends).
//
// # Audit
//
// With Config.Audit set, every call that changes something (create,
// destroy, extend, exec, signal, run_code, the code contexts' changes, and
// the file writes, removals, renames, mkdirs and uploads) is recorded in the audit log of package audit once
// it is done: who, what, which sandbox, and the error code if it failed;
// a create also records the sandbox's image and isolation tier, an exec
// its arguments, exit code, duration and byte counts, a run_code its
// duration and byte counts (not its code).
// Reads are not recorded, nor are file contents or environment values.
package api
