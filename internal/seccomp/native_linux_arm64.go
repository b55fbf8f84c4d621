package seccomp

// native is the syscall ABI Build compiles for.
var native = archARM64
