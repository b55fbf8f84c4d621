package testutil

// CodeInterpreterRef is the reference the code-interpreter image's
// tarball (CodeInterpreterImage) tags it with.
const CodeInterpreterRef = "hutch.local/code-interpreter:latest"
