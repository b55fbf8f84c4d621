// Package envd serves E2B's in-sandbox daemon API ("envd") for hutch's
// long-lived sandboxes, so that the official E2B SDKs work unchanged against
// hutch serve.
//
// New returns an http.Handler. For each request it asks a Resolver which
// sandbox the request is for (E2B's SDKs name it in the E2b-Sandbox-Id
// header and authenticate with X-Access-Token; the resolver checks both),
// then serves, through that sandbox's agent (package agent):
//
//   - the services process.Process and filesystem.Filesystem of E2B's envd
//     protocol, as described by the .proto files of package envdpb and
//     served by connectrpc.com/connect from the handlers generated from
//     them: the Connect protocol with JSON (what E2B's SDKs speak) or
//     binary protobuf, gRPC (where the listener speaks HTTP/2) and
//     gRPC-Web, gzip. The sandbox is resolved before connect-go sees the
//     request; a refusal is written in the client's protocol. Unary and
//     client-streaming calls (StreamInput: a start event naming the
//     command, then its input, in order) are audited once answered;
//   - GET and POST /files: a file's raw content, and uploads (multipart or
//     a raw body), written into the file in place (staged first, so a
//     failed upload leaves it as it was) so that a watch sees a write; an
//     upload's X-Metadata-KEY headers become the file's user.e2b.KEY
//     extended attributes, which every entry describing it returns as
//     metadata. A request a signed URL let in (Sandbox.Signed) runs as
//     its query's user;
//   - GET /health.
//
// Commands started through process.Process outlive the stream that started
// them: the handler keeps, per sandbox, a registry of the commands it
// started (pid, tag, configuration), fans their output out to the streams
// connected to them, and forgets them once they ended. As in envd, the
// deadline of the Start request (Connect-Timeout-Ms, the SDKs' timeoutMs)
// bounds the command itself: it is killed when the deadline passes, and a
// command that did not exit with 0 ends with its status as the end event's
// error ("exit status 3", "signal: killed").
//
// E2B code runs as "user" (uid and gid 1000, home /home/user) unless a
// request names "root" (uid and gid 0, home /root); the user comes from the
// Authorization header (HTTP basic, "user:") of Connect calls and from the
// username query parameter of /files. Files written and directories made for
// a user are owned by that user.
//
// Everything a client sends is untrusted: messages (16 MiB, once
// decompressed too) and uploads are bounded, a malformed message is
// answered with invalid_argument, and malformed framing with connect-go's
// code for it.
//
// A stream whose sandbox ends under it (killed, timed out, paused) is cut
// off without an end, as envd's: the handler panics with
// http.ErrAbortHandler, which connect-go (built without WithRecover)
// leaves to net/http, so that E2B's SDKs ask /health and report the
// sandbox gone rather than a command's exit.
//
// WatchDir and the watchers of CreateWatcher use the agent's watches
// (inotify in the sandbox): they report create, write, remove, rename (the
// old name of a file moved away; the new one is a create) and chmod. A
// watch that lost events (the agent's bounds, or more than 10,000 events
// kept for a watcher between two reads) ends with resource_exhausted, one
// whose directory was removed or moved with not_found.
package envd
