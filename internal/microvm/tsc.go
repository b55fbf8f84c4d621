package microvm

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Under emulation the guest's time-stamp counter is the host's (QEMU's
// TCG reads the host's counter for the guest's RDTSC), and the guest's
// kernel, which cannot calibrate it there, takes the frequency it is told
// on its command line (tsc_early_khz): told a wrong one, the guest's clock
// runs that much fast or slow (told 2 GHz on a host whose counter runs at
// 2.55, a guest's `sleep 30` took 23.6 seconds). hostTSCkHz measures the
// host's.

// defaultTSCkHz is told when the host's frequency cannot be measured.
const defaultTSCkHz = 2000000

var tscOnce struct {
	once sync.Once
	khz  int64
	err  error
}

// hostTSCkHz is the frequency of the host's time-stamp counter in kHz,
// measured once (over 50 ms, against CLOCK_MONOTONIC_RAW), or why it
// cannot be: another architecture, or a counter whose rate changes with
// the CPU's (no constant_tsc among /proc/cpuinfo's flags).
func hostTSCkHz() (int64, error) {
	tscOnce.once.Do(func() { tscOnce.khz, tscOnce.err = measureTSC(50 * time.Millisecond) })
	return tscOnce.khz, tscOnce.err
}

func measureTSC(window time.Duration) (int64, error) {
	if !haveTSC {
		return 0, errors.New("no time-stamp counter on this architecture")
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil && !strings.Contains(string(b), " constant_tsc") {
		return 0, errors.New("the host's time-stamp counter does not run at a constant rate (no constant_tsc)")
	}
	t0, c0 := tscPair()
	time.Sleep(window)
	t1, c1 := tscPair()
	if t1 <= t0 || c1 <= c0 {
		return 0, errors.New("the time-stamp counter did not advance")
	}
	khz := int64(float64(c1-c0) / float64(t1-t0) * 1e6)
	if khz < 100000 || khz > 20000000 {
		return 0, fmt.Errorf("the time-stamp counter measured at %d kHz, out of bounds", khz)
	}
	return khz, nil
}

// tscPair reads the monotonic raw clock (ns) and the counter at the same
// moment: of a few tries, the one whose clock reads around the counter's
// are closest.
func tscPair() (ns int64, tsc uint64) {
	best := int64(-1)
	for range 16 {
		var a, b unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC_RAW, &a)
		c := rdtsc()
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC_RAW, &b)
		gap := b.Nano() - a.Nano()
		if best < 0 || gap < best {
			best, ns, tsc = gap, a.Nano()+gap/2, c
		}
	}
	return ns, tsc
}

// emulatedTSCkHz is the frequency an emulated guest is told: the host's,
// or defaultTSCkHz (logged) when it cannot be measured.
func emulatedTSCkHz(log *slog.Logger) int64 {
	khz, err := hostTSCkHz()
	if err != nil {
		if log != nil {
			log.Warn("microvm: the guest's clock may run fast or slow under emulation", "err", err, "told_khz", defaultTSCkHz)
		}
		return defaultTSCkHz
	}
	return khz
}
