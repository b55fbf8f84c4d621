package microvm

// rdtsc reads the CPU's time-stamp counter.
func rdtsc() uint64

// haveTSC: this architecture has one.
const haveTSC = true
