// Package escape is hutch's escape suite. It runs the attacks of the
// project's attack list (ESCAPES.md: credential reads, persistence writes,
// path and process tricks, privilege, resources, host sockets, terminal
// injection, network egress, policy and harness tricks) inside real
// sandboxes started by the built hutch binary, and asserts for each that
//
//   - the attack failed in the specific way it should (an errno, a
//     "Permission denied", absent data), not merely with some non-zero exit;
//   - a harmless control variant in the same sandbox still works, so that
//     the test is able to fail;
//   - where the attack could leave a trace on the host, the host is
//     unchanged afterwards: file trees compared entry by entry, no
//     placeholder left behind, no sandbox process still running, no
//     connection accepted by a host listener.
//
// Every test runs twice, as the parallel subtests "root" and "user": once
// with hutch started by root (the sandbox runs as uid 0 of its own user
// namespace, an unused uid on the host) and once with hutch started by the
// unprivileged uid testutil.UnprivilegedUID, each with a workspace and a
// fake home directory of its own (outside /tmp, which the sandbox
// replaces). The test process itself must be root for both, so the suite
// skips on a developer machine and fails under HUTCH_TEST_ROOT=1, as CI
// runs it:
//
//	sudo HUTCH_TEST_ROOT=1 go test -count=1 ./test/escape/
//
// Tests are named TestItemNN_What after the ESCAPES.md item they cover and
// name the security invariants (S1..S7) in their comments. Attacks that need
// a system call rather than a shell command go through the static program in
// the attacker directory, which is copied into the workspace and prints one
// "ATTACK RESULT" line per attack, RESULT being "ok" or the errno's name, so
// tests assert the exact outcome.
//
// The suite sends no traffic off the machine: it listens only on the host's
// own addresses, and the outside addresses it tries are from TEST-NET or
// other ranges to which the sandbox has no route, so connecting fails
// before any packet is sent.
package escape
