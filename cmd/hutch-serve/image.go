package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hutch-sandbox/hutch/internal/cli"
	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/image/fetch"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

const imageUsage = `Usage:
  hutch image pull REF [flags]            pull an image from its registry (HTTPS; credentials from
                                          ~/.docker/config.json): --insecure-registry HOST:PORT (plain
                                          HTTP, repeatable), --registry-auth FILE, --platform OS/ARCH
  hutch image import FILE [--name REPO]   bring in a docker save tarball or an OCI layout (directory or tar)
  hutch image ls                          list the images (LAST USED: pulled, or a sandbox started)
  hutch image inspect REF                 print an image's record as JSON
  hutch image rm REF...                   remove names (a digest removes the image)
  hutch image prune [--max-size SIZE]     remove the layers no image holds; with --max-size, first
                                          the least recently used images until the layers fit
  hutch image limit [SIZE|none]           set the store's standing size limit (or show it, and what
                                          the layers take): after every pull and import, and every
                                          minute in hutch serve, the least recently used images are
                                          removed until the layers fit

REF is a Docker reference: python:3.12 (docker.io/library/python:3.12),
ghcr.io/owner/name:tag, REPO@sha256:DIGEST. On a terminal, pull and import
show their progress on stderr; the digest is printed on stdout.

A pull or import keeps the store within --max-size SIZE if given, else
$HUTCH_IMAGE_CACHE_MAX, else the store's standing limit. The image brought
in, images in use by a sandbox and images used in the last minute are never
removed for it.

Every command takes --state-dir DIR (default: $HUTCH_STATE_DIR, else
/var/lib/hutch for root, shared with hutch serve, and
$XDG_DATA_HOME/hutch, ~/.local/share/hutch, for an ordinary user).
`

// cmdImage is `hutch image`.
func cmdImage(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, imageUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	sub, rest := args[0], args[1:]
	fs := flag.NewFlagSet("hutch image "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	stateDir := fs.String("state-dir", image.DefaultStateDir(), "the state `dir` that holds the images")
	repo := fs.String("name", "", "for import: the repository an OCI layout's bare tags belong to")
	var insecure cli.List
	fs.Var(&insecure, "insecure-registry", "for pull: reach registry `HOST:PORT` over plain HTTP (repeatable)")
	authFile := fs.String("registry-auth", "", "for pull: take credentials from this Docker configuration `file`")
	plat := fs.String("platform", "", "for pull: the platform to take from a multi-platform image, e.g. linux/arm64")
	maxSize := fs.String("max-size", "", "for prune, pull and import: remove the least recently used images until the layers take at most `size` (e.g. 20g); images in use stay")
	fs.Usage = func() { fmt.Fprint(stderr, imageUsage) }
	switch sub {
	case "pull", "import", "ls", "inspect", "rm", "prune", "limit":
	default:
		msg := fmt.Sprintf("hutch: unknown image command %q", sub)
		if c := cli.Closest(sub, []string{"pull", "import", "ls", "inspect", "rm", "prune", "limit"}); len(c) > 0 {
			msg += fmt.Sprintf("; did you mean %q?", c[0])
		}
		fmt.Fprintln(stderr, msg)
		return 2
	}
	if err := cli.Parse(fs, flagsFirst(rest, "state-dir", "name", "insecure-registry", "registry-auth", "platform", "max-size"), stderr); err != nil {
		return usageCode(err)
	}
	st, err := image.Open(*stateDir)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return 1
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return 1
	}
	wantArgs := func(n int, what string) bool {
		if (n >= 0 && fs.NArg() != n) || (n < 0 && fs.NArg() == 0) {
			fmt.Fprintf(stderr, "hutch: image %s takes %s\n", sub, what)
			return false
		}
		return true
	}
	switch sub {
	case "pull", "import":
		if !wantArgs(1, map[string]string{"pull": "one REF", "import": "one FILE"}[sub]) {
			return 2
		}
		opt := fetch.Options{Root: os.Geteuid() == 0}
		if opt.MaxBytes, err = cacheMax(*maxSize); err != nil {
			return fail(err)
		}
		var m *meter
		if f, ok := stderr.(*os.File); ok && sandbox.IsTerminal(f) {
			m = newMeter(f, sub+"ing", fs.Arg(0))
			m.options(&opt)
		}
		note := func(s string) {
			if m != nil {
				m.println(s)
			} else {
				fmt.Fprintln(stderr, s)
			}
		}
		opt.Warn = func(s string) { note("hutch: warning: " + s) }
		opt.Evicted = func(img *image.Image) {
			note(fmt.Sprintf("hutch: removed image %s, the least recently used, to keep the store within its size limit", describe(img)))
		}
		var imgs []*image.Image
		if sub == "pull" {
			// Ctrl-C ends the pull (what it verified stays); a second one,
			// while it waits for another pull of the image, ends hutch.
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			context.AfterFunc(ctx, stop)
			var img *image.Image
			if img, err = fetch.Pull(ctx, st, fs.Arg(0), fetch.PullOptions{Options: opt, Insecure: insecure, AuthFile: *authFile, Platform: *plat}); err == nil {
				imgs = append(imgs, img)
			}
		} else {
			imgs, err = fetch.Import(st, fs.Arg(0), *repo, opt)
		}
		if m != nil {
			out, ok := stdout.(*os.File)
			m.finish(err == nil, !ok || !sandbox.IsTerminal(out))
		}
		for _, img := range imgs {
			if sub == "pull" {
				fmt.Fprintln(stdout, img.Digest)
			} else {
				fmt.Fprintf(stdout, "%s %s\n", img.Digest, strings.Join(img.Refs, " "))
			}
		}
		if err != nil {
			return fail(err)
		}
	case "ls":
		if !wantArgs(0, "no arguments") {
			return 2
		}
		imgs, err := st.List()
		if err != nil {
			return fail(err)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tDIGEST\tPLATFORM\tSIZE\tADDED\tLAST USED")
		for _, img := range imgs {
			names := img.Refs
			if len(names) == 0 {
				names = []string{"<none>"}
			}
			for _, n := range names {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n, short(img.Digest), img.Platform, humanSize(img.Size),
					img.Added.Local().Format(time.DateTime), st.LastUse(img).Local().Format(time.DateTime))
			}
		}
		tw.Flush()
	case "inspect":
		if !wantArgs(1, "one REF") {
			return 2
		}
		img, err := st.Get(fs.Arg(0))
		if err != nil {
			return fail(err)
		}
		out := struct {
			*image.Image
			Refs []string `json:"refs"`
		}{img, img.Refs}
		b, _ := json.MarshalIndent(out, "", "  ")
		fmt.Fprintln(stdout, string(b))
	case "rm":
		if !wantArgs(-1, "one REF or more") {
			return 2
		}
		code := 0
		for _, r := range fs.Args() {
			if err := st.Remove(r); err != nil {
				code = fail(err)
				continue
			}
			fmt.Fprintf(stdout, "removed %s\n", r)
		}
		return code
	case "prune":
		if !wantArgs(0, "no arguments") {
			return 2
		}
		if *maxSize != "" {
			limit, err := policy.ParseSize(*maxSize)
			if err != nil {
				return fail(fmt.Errorf("--max-size: %w", err))
			}
			removed, err := st.Evict(limit)
			for _, img := range removed {
				fmt.Fprintf(stdout, "removed image %s\n", describe(img))
			}
			if err != nil {
				return fail(err)
			}
		}
		n, err := st.Prune()
		if err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "removed %d unused layers\n", n)
	case "limit":
		if fs.NArg() > 1 {
			fmt.Fprintln(stderr, "hutch: image limit takes at most one SIZE (or none)")
			return 2
		}
		if fs.NArg() == 1 {
			limit, err := parseLimit(fs.Arg(0))
			if err != nil {
				return fail(fmt.Errorf("image limit: %w", err))
			}
			if err := st.SetLimit(limit); err != nil {
				return fail(err)
			}
			removed, err := st.Fit(0)
			for _, img := range removed {
				fmt.Fprintf(stdout, "removed image %s\n", describe(img))
			}
			if err != nil {
				return fail(err)
			}
		}
		limit, err := st.Limit()
		if err != nil {
			return fail(err)
		}
		used, err := st.Usage()
		if err != nil {
			return fail(err)
		}
		if limit == 0 {
			fmt.Fprintf(stdout, "no limit; the layers take %s\n", humanSize(used))
		} else {
			fmt.Fprintf(stdout, "limit %s; the layers take %s\n", humanSize(limit), humanSize(used))
		}
	}
	return 0
}

// cacheEnv names the variable that bounds the image store for the pulls
// and imports of a process (hutch run's too), when --max-size does not.
const cacheEnv = "HUTCH_IMAGE_CACHE_MAX"

// cacheMax is the size a pull or import keeps the store within: flag (from
// --max-size) if given, else $HUTCH_IMAGE_CACHE_MAX, else 0 (the store's
// standing limit).
func cacheMax(flag string) (int64, error) {
	name, v := "--max-size", flag
	if v == "" {
		name, v = cacheEnv, os.Getenv(cacheEnv)
	}
	if v == "" {
		return 0, nil
	}
	n, err := policy.ParseSize(v)
	if err == nil && n == 0 {
		err = errors.New("a limit of 0 would keep no image: give a size such as 20g")
	}
	if err != nil {
		return 0, fmt.Errorf("%s %q: %w", name, v, err)
	}
	return n, nil
}

// parseLimit parses the size limit of an image store: a size such as 20g,
// or "none" (0, no limit).
func parseLimit(s string) (int64, error) {
	if s == "none" {
		return 0, nil
	}
	n, err := policy.ParseSize(s)
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, errors.New("a limit of 0 would keep no image: give a size such as 20g, or none for no limit")
	}
	return n, nil
}

// describe names img by its digest and names, for messages.
func describe(img *image.Image) string {
	if len(img.Refs) == 0 {
		return img.Digest
	}
	return img.Digest + " (" + strings.Join(img.Refs, ", ") + ")"
}

// short is a digest's first 12 hex digits.
func short(d string) string {
	h := strings.TrimPrefix(d, "sha256:")
	if len(h) > 12 {
		h = h[:12]
	}
	return h
}

// humanSize prints n bytes in binary units.
func humanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, u := float64(n), "B"
	for _, next := range []string{"KiB", "MiB", "GiB", "TiB"} {
		if v < unit {
			break
		}
		v, u = v/unit, next
	}
	return fmt.Sprintf("%.1f %s", v, u)
}

// flagsFirst moves the flags among args (valued ones named in valued, as
// "--f V" or "--f=V") before the other arguments, so that flags may follow
// an image's name as git's and docker's do. No image reference or file
// hutch takes starts with '-'.
func flagsFirst(args []string, valued ...string) []string {
	var flags, rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			rest = append(rest, a)
			continue
		}
		flags = append(flags, a)
		n := strings.TrimLeft(a, "-")
		if !strings.Contains(n, "=") && slices.Contains(valued, n) && i+1 < len(args) {
			flags = append(flags, args[i+1])
			i++
		}
	}
	return append(flags, rest...)
}
