// Package agent is hutch's agent, PID 1 of every long-lived sandbox, and the
// daemon's end of its connection.
//
// Serve runs inside the sandbox on one connected stream socket: it runs
// commands (pipes or a pty, signals, window sizes, timeouts), performs file
// operations with the sandbox's own view of the filesystem (so a symlink the
// sandbox made never leads to a host file, S5), watches directories with
// inotify and, as PID 1, reaps every orphan. Client is the daemon's end. It treats everything the agent sends as
// untrusted (S7): every frame, field, count and byte of buffered output is
// bounded, ids it does not know are ignored, and anything malformed ends the
// connection with an error wrapping ErrProtocol.
//
// # Protocol
//
// The connection carries frames: a 4-byte big-endian length, then that many
// bytes of payload. A payload starts with a 6-byte header — type (1 byte),
// stream (1 byte), id (4 bytes, big-endian) — followed by a body. No frame is
// longer than the receiver's limit: the agent's ServeOptions.MaxFrame (1 MiB
// by default, announced in its hello), 1 MiB for the client. The agent itself
// sends no frame longer than 64 KiB + 6 bytes.
//
//	hello    agent → client  id 0; JSON {"version":1,"max_frame":N[,"first_id":N]}, the first frame, and the answer to an attach
//	request  client → agent  JSON {"op":"exec"|"signal"|"resize"|"ps"|"read"|"write"|"stat"|"list"|"mkdir"|"remove"|"rename"|"chown"|"watch"|"killall"|"usage"|"layer"|"detach", ...}
//	response agent → client  JSON {"error":{"code","message"}} or the op's result
//	data     both            raw bytes of one stream, at most 64 KiB
//	eof      both            the sender ends the stream
//	credit   both            4-byte big-endian count: the receiver may send that many more bytes on the stream
//	cancel   client → agent  the client abandons the request (an exec's command is killed)
//	exit     agent → client  JSON {"code","signal","timed_out"}: the command ended
//	entries  agent → client  JSON array of file infos or processes, a part of a list or ps result
//	events   agent → client  stream 1; JSON array of watch events {"op","path","dir"}
//	attach   client → agent  id 0; 8-byte big-endian Unix time in ns, then 32 random bytes: a client takes over a detached connection
//
// The client picks the id of every request, unique among its requests in
// flight, and the frames of that request carry it: an exec's id names the
// process for its streams, signals and resizes. Stream 0 is a command's
// stdin or the content of a write (client → agent), stream 1 its stdout,
// the content of a read or of a layer (a tar) or the events of a watch, stream 2 its stderr
// (agent → client); other frames use stream 0.
//
// Every stream is flow-controlled by a window of 256 KiB: the sender may
// have at most that many bytes outstanding, and the receiver grants them
// again with credit frames once it has consumed them (the agent once it
// wrote them to the command or the file, the client once its caller read
// them). The agent reads a command's output only while it holds credit, so
// a command that writes gigabytes to a slow reader blocks in its pipe; each
// side buffers at most one window per stream. The agent reports the end of
// a command's stdin (it stopped reading, or exited) with an eof on stream 0.
// The bytes of an events frame's body count against the window of stream 1.
//
// An exec's response (its pid) comes before any of its output; its exit
// frame comes after its output ended, unless the output outlives the
// command by more than a short grace (a background process still holds the
// pipe), in which case output may follow the exit frame until its eof. A
// read's content precedes its response; a write's response follows the eof
// of its content, or comes early with an error. The entries frames of a list
// or ps precede its response; a result holds at most 100,000 entries and
// 16 MiB.
//
// A watch ({"path","recursive"}) responds once its directory — and, if
// recursive, every directory below it — is watched; its events frames
// follow, until the client cancels it or the agent ends it with an eof on
// stream 1 (the directory was removed or moved: a remove or rename event
// with path "" comes first). An event's op is "create" (also the new name
// of a move), "write", "remove", "rename" (the old name of a move),
// "chmod", or "overflow" (path "": events were lost). Its path is relative
// to the watched directory, at most 4096 bytes, without empty, "." or ".."
// elements. A recursive watch watches the directories that appear, and
// reports what it finds in them as created. The agent bounds each watch to
// 8,192 directories and 10,000 events a second (with a burst of as many),
// reporting an overflow when it drops events for either; it reads the
// kernel's queue only while it may send a full events frame, so a client
// that does not read the events makes the queue overflow, which is
// reported too. The agent does not report its own temporary files (those
// of writes).
//
// A killall ({"op":"killall"}) kills every process of the sandbox but the
// agent and answers once none is left (a files-only pause): only an agent
// that is PID 1 of the sandbox's pid namespace does, which kill(-1) then
// bounds to the sandbox; it goes on with kill(-1, SIGKILL) until the kernel
// finds no process to signal, or the client cancels it.
//
// A detach ({"op":"detach"}) hands the connection over, for a sandbox about
// to be saved to disk (a checkpoint): the agent answers it, then sends
// nothing more and ignores every frame but an attach. The requests in
// flight end for the client: an exec's command keeps running, its stdin
// closed and its output read and dropped, and every other request is
// cancelled. An attach (on the same connection, or on the one the agent's
// descriptor leads to once the sandbox is restored) starts a new session:
// the agent answers with a hello whose first_id is above the id of every
// request it ever saw, so that the new client's ids never name a command
// the detach left running. The client reads nothing after the detach's
// response, so that the next client reads the agent's hello first.
//
// Strings that name files, arguments and environment entries travel as JSON
// strings when they are valid UTF-8 and as {"b":"<base64>"} otherwise, so any
// byte string the kernel accepts survives the trip.
//
// # Over a network
//
// A sandbox whose daemon reaches it over a network (a pod's) runs the agent
// with --listen ADDR: ServeListener. A connection first sends the line
// "hutch-agent/1 TOKEN\n" (over TLS when the agent has a certificate); a
// wrong token, a line over 512 bytes or none within 10 s, or a connection
// from the sandbox's own addresses is closed with no answer. An admitted
// connection gets the hello, with a first_id above every request id seen,
// and takes over from the connection before it as a detach and an attach
// would: that one is closed, its commands go on without their streams. The
// agent does not end with a connection.
package agent
