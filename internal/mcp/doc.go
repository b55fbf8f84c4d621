// Package mcp is hutch's Model Context Protocol server: the tools through
// which an agent's harness (Claude Code, Codex, Cursor, an agent SDK)
// creates sandboxes, runs commands in them and reads and writes their
// files — sandbox_create, sandbox_list, sandbox_info, sandbox_kill, exec,
// exec_poll, exec_kill, file_read, file_write, file_edit, file_list and
// port_url; and run_code, which runs code in the code interpreter of a
// sandbox of an image with Jupyter kernels (its output, its value, a plot
// as an image), where the backend reaches such interpreters
// (Interpreters: hutch serve's does, and hutch mcp's when the image of its
// flags has kernels).
//
// The tools act on a Backend: the sandboxes of one tenant of `hutch
// serve` (mcphttp.DaemonBackend, behind /mcp on the daemon's listeners), or those
// of one `hutch mcp` session on a laptop (its own backend, in package
// main). Whatever a tool is asked, the backend bounds it: a sandbox is
// never created wider than its operator allows (the daemon's limits, or
// the flags `hutch mcp` was started with).
//
// Every failure a model can act on comes back as a tool error (a result
// with isError set and a message naming the problem), never as a broken
// connection. Output and files too large for a message are cut (the head
// and the tail kept, the size of the cut said) and published as resource
// links: HTTP URLs of a Links server, which a client fetches outside the
// JSON-RPC stream.
//
// Where a sandbox's approval rules (a policy's approvals:) ask about a
// command exec is to run, a client that declared the elicitation
// capability is asked (elicitation/create: a message naming the command,
// the rule and the reason, and a form of one enum field, answer: once,
// run, always or deny); decline, cancel or an error refuse it. On hutch
// serve the same question also waits in the daemon's API and web pages,
// and the first answer decides; a client that cannot be asked waits for
// those or for the question's expiry. A refused command never starts, and
// the tool error says which rule refused it and how to allow it.
//
// The protocol itself is the official Go SDK's
// (github.com/modelcontextprotocol/go-sdk): its stdio and streamable HTTP
// transports, JSON schemas inferred from the tools' argument types, and
// session handling.
package mcp
