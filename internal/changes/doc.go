// Package changes reads, shows, applies and exports change sets: what a
// command run with hutch run --review wrote to its workspace, kept in an
// overlayfs upper directory instead of the user's files.
//
// A Store holds the sets, one directory each, named by its ID: meta.json
// (the workspace, the runs, and the base, the workspace's state of every
// changed path when the run ended), upper/ and work/ (overlayfs's upper and
// work directories, mounted with userxattr inside the sandbox's user
// namespace). Changes walks the upper directory only, never the whole
// workspace, and compares what it finds with the workspace. The upper
// directory is written by the sandbox: it is read without following a
// symbolic link and with what is read bounded; what must never reach the
// host as it is (device nodes, fifos, sockets) is reported as refused.
//
// Apply writes a set into its workspace only when every path it touches is
// still as the base recorded, each file replaced atomically (a temporary
// file in the same directory, synced, renamed); protected names, symbolic
// links out of the workspace and setuid or setgid bits need the user to
// name them. ApplyBranch commits a set on a new git branch without touching
// the working tree or the index; Export writes a patch git apply accepts.
//
// A Stack is a root made of layers over a base, read as overlayfs shows it
// without mounting anything; Compare turns two stacks into changes (the
// diff of a served sandbox against its base, a snapshot or another
// sandbox), which the same renderers write through Sides.
package changes
