// Command cli measures how long short commands take from start to exit:
// hutch's CLI against the floor of any Go program (a hello world) and
// against curl doing the same call of the daemon's API. It takes named
// command lines,
//
//	hello=/tmp/b/hello
//	version=/tmp/b/hutch version
//	ls=/tmp/b/hutch ls
//	curl-ls=curl -s --unix-socket /tmp/b/s.sock http://hutch/v1/sandboxes
//
// runs each a few times to warm up, then N rounds in which every command
// runs once, one after the other (round-robin: drift of the machine hits
// all alike), each timed from fork to wait4. It prints, per command, the
// median, p90 and mean wall time and the median CPU time (user + system
// of the process and what it reaped), and for each pair a/b of -ratio the
// ratio of the medians and the median of the per-round ratios (paired:
// a's and b's runs of the same round, next to each other in time).
//
// A command line is split on white space (no quoting). Every run gets
// /dev/null as stdin and stdout and the tool's environment; a run that
// fails stops the measurement, with its stderr.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/hutch-sandbox/hutch/bench/report"
)

type command struct {
	name string
	args []string
	wall []float64 // ms, one per round
	cpu  []float64 // ms
}

func main() {
	n := flag.Int("n", 200, "timed rounds")
	warmup := flag.Int("warmup", 10, "untimed runs of each command first")
	markdown := flag.Bool("markdown", false, "print markdown tables")
	ratios := flag.String("ratio", "", "comma-separated `a/b` pairs of command names to compare")
	timeout := flag.Duration("timeout", 30*time.Second, "kill a run that takes longer")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "Usage: cli [flags] NAME=COMMAND LINE ...")
		flag.PrintDefaults()
	}
	flag.Parse()
	var cmds []*command
	for _, a := range flag.Args() {
		name, line, ok := strings.Cut(a, "=")
		if !ok || name == "" || len(strings.Fields(line)) == 0 {
			fmt.Fprintf(os.Stderr, "cli: %q: want NAME=COMMAND LINE\n", a)
			os.Exit(2)
		}
		cmds = append(cmds, &command{name: name, args: strings.Fields(line)})
	}
	if len(cmds) == 0 {
		flag.Usage()
		os.Exit(2)
	}
	fmt.Fprintf(os.Stderr, "cli: %d warm-up runs each, then %d rounds of %d commands\n", *warmup, *n, len(cmds))
	for _, c := range cmds {
		for range *warmup {
			if _, _, err := runOnce(c.args, *timeout); err != nil {
				fmt.Fprintf(os.Stderr, "cli: %s: %v\n", c.name, err)
				os.Exit(1)
			}
		}
	}
	for range *n {
		for _, c := range cmds {
			wall, cpu, err := runOnce(c.args, *timeout)
			if err != nil {
				fmt.Fprintf(os.Stderr, "cli: %s: %v\n", c.name, err)
				os.Exit(1)
			}
			c.wall, c.cpu = append(c.wall, wall), append(c.cpu, cpu)
		}
	}

	t := report.NewTable(*markdown, "command", "median ms", "p90 ms", "mean ms", "CPU ms")
	byName := map[string]*command{}
	for _, c := range cmds {
		byName[c.name] = c
		t.Row(c.name, ms(report.Percentile(c.wall, 50)), ms(report.Percentile(c.wall, 90)), ms(mean(c.wall)), ms(report.Percentile(c.cpu, 50)))
	}
	t.Print(os.Stdout)

	rt := report.NewTable(*markdown, "ratio", "median", "paired median", "p90", "CPU")
	rows := 0
	for _, pair := range strings.Split(*ratios, ",") {
		an, bn, ok := strings.Cut(strings.TrimSpace(pair), "/")
		a, b := byName[an], byName[bn]
		if !ok || a == nil || b == nil {
			continue
		}
		paired := make([]float64, len(a.wall))
		for i := range a.wall {
			paired[i] = a.wall[i] / b.wall[i]
		}
		rt.Row(an+"/"+bn,
			ratio(report.Percentile(a.wall, 50), report.Percentile(b.wall, 50)),
			fmt.Sprintf("%.2f", report.Percentile(paired, 50)),
			ratio(report.Percentile(a.wall, 90), report.Percentile(b.wall, 90)),
			ratio(report.Percentile(a.cpu, 50), report.Percentile(b.cpu, 50)))
		rows++
	}
	if rows > 0 {
		rt.Print(os.Stdout)
	}
	fmt.Println("Wall time: fork to wait4 of the command line; CPU: its user+system time (and its reaped children's).")
	fmt.Println("Ratios are a/b (below 1: a is faster); paired: the median of a/b over the rounds.")
}

// runOnce runs args once and returns its wall and CPU time in ms.
func runOnce(args []string, timeout time.Duration) (wall, cpu float64, err error) {
	cmd := exec.Command(args[0], args[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	timer := time.AfterFunc(timeout, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	err = cmd.Wait()
	wall = float64(time.Since(start)) / float64(time.Millisecond)
	timer.Stop()
	if err != nil {
		return 0, 0, fmt.Errorf("%q: %v\n%s", args, err, stderr.String())
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		cpu = float64(time.Duration(ru.Utime.Nano()+ru.Stime.Nano())) / float64(time.Millisecond)
	}
	return wall, cpu, nil
}

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func ms(v float64) string { return fmt.Sprintf("%.2f", v) }

func ratio(a, b float64) string {
	if b == 0 || math.IsNaN(a/b) {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}
