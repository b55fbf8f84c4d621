// Command readopt measures what a restarted `hutch serve` takes to take
// its sandboxes again (bench/readopt.sh): N sandboxes of the namespace
// tier made, the daemon killed (SIGKILL: a crash), a new one started on
// the same state directory, and the time from its start until it
// answers (it takes every sandbox again before it listens), and until
// every sandbox has answered a command (8 asked at once), the same
// processes still running in them. The floor, in the same run: a daemon
// started on an empty state directory, until it answers. Each round, for
// each N, repeated -rounds times; medians printed, with the ratio to the
// floor and the cost per sandbox.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hutch-sandbox/hutch/client"
)

func main() {
	hutch := flag.String("hutch", "", "the hutch binary")
	work := flag.String("work", "", "a fresh directory for the daemons (mode 0711 or wider)")
	counts := flag.String("n", "1,10,50", "sandboxes per round, comma-separated")
	rounds := flag.Int("rounds", 3, "rounds per count")
	markdown := flag.Bool("markdown", false, "print a markdown table")
	flag.Parse()
	if *hutch == "" || *work == "" {
		fmt.Fprintln(os.Stderr, "readopt: -hutch and -work are needed")
		os.Exit(2)
	}
	var ns []int
	for _, f := range strings.Split(*counts, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "readopt: -n %q: not a list of counts\n", *counts)
			os.Exit(2)
		}
		ns = append(ns, n)
	}
	if err := run(*hutch, *work, ns, *rounds, *markdown); err != nil {
		fmt.Fprintln(os.Stderr, "readopt:", err)
		os.Exit(1)
	}
}

// daemon is a hutch serve of the run's.
type daemon struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// start starts hutch serve on dir's socket and state and returns it once
// it answers, with how long that took.
func start(ctx context.Context, hutch, dir string) (*daemon, *client.Client, time.Duration, error) {
	logf, err := os.OpenFile(filepath.Join(dir, "serve.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, 0, err
	}
	defer logf.Close()
	sock := filepath.Join(dir, "hutch.sock")
	d := &daemon{cmd: exec.Command(hutch, "serve", "--socket", sock, "--state-dir", filepath.Join(dir, "state"), "--max-sandboxes", "500", "--tenant-memory", "600g"), done: make(chan struct{})}
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	t0 := time.Now()
	if err := d.cmd.Start(); err != nil {
		return nil, nil, 0, err
	}
	_ = os.WriteFile(filepath.Join(dir, "serve.pid"), []byte(strconv.Itoa(d.cmd.Process.Pid)+"\n"), 0o644)
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	c, err := client.New("unix://"+sock, "")
	if err != nil {
		d.stop()
		return nil, nil, 0, err
	}
	for end := time.Now().Add(2 * time.Minute); ; {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		err = c.Health(hctx)
		cancel()
		if err == nil {
			return d, c, time.Since(t0), nil
		}
		select {
		case <-d.done:
			return nil, nil, 0, fmt.Errorf("hutch serve exited (%s)", filepath.Join(dir, "serve.log"))
		default:
		}
		if time.Now().After(end) {
			d.stop()
			return nil, nil, 0, fmt.Errorf("hutch serve does not answer: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stop ends the daemon as an operator does (SIGTERM: it ends its
// sandboxes).
func (d *daemon) stop() {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(2 * time.Minute):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

// kill kills the daemon (a crash): its sandboxes run on.
func (d *daemon) kill() {
	_ = d.cmd.Process.Kill()
	<-d.done
}

// sample is one round's figures.
type sample struct{ answers, all time.Duration }

func run(hutch, work string, ns []int, rounds int, markdown bool) error {
	ctx := context.Background()
	floor := []time.Duration{}
	byN := map[int][]sample{}
	seq := 0
	dirOf := func() (string, error) {
		seq++
		dir := filepath.Join(work, strconv.Itoa(seq))
		return dir, os.Mkdir(dir, 0o711)
	}
	for r := 0; r < rounds; r++ {
		// The floor: a daemon on an empty state directory.
		dir, err := dirOf()
		if err != nil {
			return err
		}
		d, _, took, err := start(ctx, hutch, dir)
		if err != nil {
			return err
		}
		floor = append(floor, took)
		d.stop()
		for _, n := range ns {
			s, err := round(ctx, hutch, dirOf, n)
			if err != nil {
				return err
			}
			byN[n] = append(byN[n], s)
		}
	}
	med := func(ds []time.Duration) time.Duration {
		ds = slices.Clone(ds)
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
	f := med(floor)
	if markdown {
		fmt.Println("| sandboxes | restart → answers (all taken again) | ratio to the floor | per sandbox | restart → a command answered in each |")
		fmt.Println("| ---: | ---: | ---: | ---: | ---: |")
		fmt.Printf("| 0 (floor: an empty state directory) | %s | 1.00× | — | — |\n", ms(f))
	} else {
		fmt.Printf("floor (a daemon on an empty state directory, until it answers): %s (median of %d)\n", ms(f), len(floor))
	}
	for _, n := range ns {
		var ans, all []time.Duration
		for _, s := range byN[n] {
			ans, all = append(ans, s.answers), append(all, s.all)
		}
		a, b := med(ans), med(all)
		per := (a - f) / time.Duration(n)
		if markdown {
			fmt.Printf("| %d | %s | %.2f× | %s | %s |\n", n, ms(a), float64(a)/float64(f), ms(per), ms(b))
		} else {
			fmt.Printf("%d sandboxes: the restarted daemon, every sandbox taken again, answers in %s (%.2f× the floor; %s per sandbox); a command answered in every sandbox, its process still there, %s after the restart\n", n, ms(a), float64(a)/float64(f), ms(per), ms(b))
		}
	}
	return nil
}

// round makes n sandboxes, each with a process that stays, kills the
// daemon, starts another on its state and times it until every sandbox
// answers with that process still there; then stops it (ending them).
func round(ctx context.Context, hutch string, dirOf func() (string, error), n int) (sample, error) {
	dir, err := dirOf()
	if err != nil {
		return sample{}, err
	}
	d, c, _, err := start(ctx, hutch, dir)
	if err != nil {
		return sample{}, err
	}
	ids := make([]string, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			sb, err := c.Create(ctx, client.CreateOptions{Timeout: 30 * time.Minute})
			if err != nil {
				errs <- err
				return
			}
			ids[i] = sb.ID
			if _, err := c.Run(ctx, sb.ID, client.Command{Args: []string{"sh", "-c", "setsid sleep 3600 >/dev/null 2>&1 </dev/null & echo $! >/tmp/kept"}}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		d.stop()
		return sample{}, err
	}
	d.kill()
	t0 := time.Now()
	d, c, answers, err := start(ctx, hutch, dir)
	if err != nil {
		return sample{}, err
	}
	defer d.stop()
	// Every sandbox answers, its process still there: 8 asked at once.
	errs = make(chan error, n)
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			for {
				res, err := c.Run(ctx, id, client.Command{Args: []string{"sh", "-c", "kill -0 $(cat /tmp/kept) && echo kept"}})
				if err == nil && res.Code == 0 && strings.TrimSpace(string(res.Stdout)) == "kept" {
					return
				}
				if time.Since(t0) > 5*time.Minute {
					errs <- fmt.Errorf("sandbox %s was not taken again: %v", id, err)
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return sample{}, err
	}
	return sample{answers: answers, all: time.Since(t0)}, nil
}
