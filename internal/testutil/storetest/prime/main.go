//go:build linux

// Command prime imports image tarballs (docker save) into the test run's
// shared image stores (storetest.Prime), so that the tests that start
// daemons from them find them imported: scripts/test.sh runs it while the
// linters run, with $HUTCH_TEST_RUN set to its own pid.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil/storetest"
)

func main() {
	failed := false
	for _, tarball := range os.Args[1:] {
		begin := time.Now()
		if err := storetest.Prime(tarball); err != nil {
			fmt.Fprintf(os.Stderr, "prime: %v\n", err)
			failed = true
			continue
		}
		fmt.Printf("prime: %s in the run's store (%.0f s)\n", tarball, time.Since(begin).Seconds())
	}
	if failed {
		os.Exit(1)
	}
}
