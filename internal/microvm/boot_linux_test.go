package microvm

import (
	"context"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// BenchmarkBoot measures a guest's boot: from Boot's call to the agent's
// first bytes (boot-s/op, which includes building the initramfs), then the
// first request answered (first-op-ms/op), then Close. Under software
// emulation (no /dev/kvm) the figures are those of TCG, many times those
// of KVM. The sub-benchmarks differ in the guest's init: the test binary
// (linked dynamically, with its libraries) or hutch-agent as released.
//
//	sudo go test -run '^$' -bench Boot -benchtime 5x ./internal/microvm
func BenchmarkBoot(b *testing.B) {
	k := needVM(b)
	for _, bc := range []struct {
		name string
		init func(b *testing.B) string
	}{
		{"init=test-binary", func(*testing.B) string { return "" }},
		{"init=hutch-agent", func(b *testing.B) string {
			return filepath.Join(filepath.Dir(testutil.Hutch(b)), "hutch-agent")
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			init := bc.init(b)
			var boot, first time.Duration
			for b.Loop() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				start := time.Now()
				vm, err := Boot(ctx, Config{Kernel: k, Init: init, AllowEmulation: true})
				if err != nil {
					cancel()
					b.Fatal(err)
				}
				ready := time.Now()
				c := agent.NewClient(vm.Conn())
				if _, err := c.ReadFile(ctx, "/proc/sys/kernel/osrelease", io.Discard); err != nil {
					b.Fatal(err)
				}
				boot += ready.Sub(start)
				first += time.Since(ready)
				b.Logf("boot %v, first request %v", ready.Sub(start), time.Since(ready))
				c.Close()
				if err := vm.Close(); err != nil {
					b.Fatal(err)
				}
				cancel()
			}
			b.ReportMetric(boot.Seconds()/float64(b.N), "boot-s/op")
			b.ReportMetric(float64(first.Milliseconds())/float64(b.N), "first-op-ms/op")
		})
	}
}

// BenchmarkAgentRoundTrip measures a request's round trip to a guest's
// agent (a stat), b.N of them one after another on one guest. Each has a
// minute to be answered: one that is not fails the benchmark with what the
// host and the guest's watch of the port (Config.Debug) say. Many round
// trips look for lost wake-ups on the port:
//
//	sudo go test -run '^$' -bench AgentRoundTrip -benchtime 20000x ./internal/microvm
func BenchmarkAgentRoundTrip(b *testing.B) {
	k := needVM(b)
	ctx := context.Background()
	vm, err := Boot(ctx, Config{Kernel: k, AllowEmulation: true, Debug: true})
	if err != nil {
		b.Fatal(err)
	}
	defer vm.Close()
	c := agent.NewClient(vm.Conn())
	defer c.Close()
	i := 0
	for b.Loop() {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		_, err := c.Stat(rctx, "/tmp")
		cancel()
		if err != nil {
			b.Fatalf("request %d: %v\n%s", i, err, portReport(vm))
		}
		i++
	}
}
