package microvm

import "os"

// ReaperCommand is the argument that makes the running program the
// reaper of one of a VM's host processes (ReaperMain): Boot starts QEMU
// and each virtiofsd under one, as "/proc/self/exe microvm-reaper ...".
const ReaperCommand = "microvm-reaper"

// MainIfReaper runs ReaperMain and exits when the process was started as
// "PROGRAM microvm-reaper ...". A program that boots VMs (hutch, hutch
// serve's binary, a test binary) calls it, or dispatches ReaperCommand to
// ReaperMain, before anything else.
func MainIfReaper() {
	if len(os.Args) >= 2 && os.Args[1] == ReaperCommand {
		os.Exit(ReaperMain(os.Args[2:], os.Stderr))
	}
}
