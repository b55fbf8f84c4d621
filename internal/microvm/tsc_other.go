//go:build !amd64

package microvm

func rdtsc() uint64 { return 0 }

const haveTSC = false
