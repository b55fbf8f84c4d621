package main

import (
	"archive/tar"
	"cmp"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/hutch-sandbox/hutch/client"
	"github.com/hutch-sandbox/hutch/internal/cli"
	"github.com/hutch-sandbox/hutch/internal/hostperm"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/runner"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// The commands that talk to a daemon (create, exec, cp, ls, rm, events)
// reach it through package client at $HUTCH_HOST with $HUTCH_TOKEN. They
// exit with 0, 1 when the daemon refused or failed, 2 after a usage error;
// exec exits with the command's code, and 125 when hutch failed.

// remoteTimeout bounds one call to the daemon other than streams.
const remoteTimeout = 5 * time.Minute

// remoteFlags returns a flag set for a remote command.
func remoteFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("hutch "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: hutch %s %s\n\nThe daemon is at $HUTCH_HOST (default %s), with the token in $HUTCH_TOKEN.\n", name, synopsis, client.DefaultHost)
		if hasFlags(fs) {
			fmt.Fprintln(stderr, "\nFlags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// newClient returns a client of the daemon named by the environment.
func newClient(stderr io.Writer) (*client.Client, bool) {
	c, err := client.New("", "")
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return nil, false
	}
	return c, true
}

// keyValues parses repeated KEY=VALUE flags.
func keyValues(flagName string, list []string) (map[string]string, error) {
	if len(list) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(list))
	for _, kv := range list {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--%s %q: want KEY=VALUE", flagName, kv)
		}
		m[k] = v
	}
	return m, nil
}

// cmdCreate is hutch create: the flags of hutch run describe the policy,
// which goes to the daemon in the policy-file schema. Secrets named by
// --secret (or by the policy file with an env: or file: source) are read
// here, from this command's environment and files, and travel in the
// request; the daemon gives the sandbox placeholders only.
func cmdCreate(args []string, stdout, stderr io.Writer) int {
	fs, rf := runner.NewFlags("create", "", stderr)
	idle := fs.Duration("idle-timeout", 0, "end the sandbox after this long without use")
	disk := fs.String("disk", "", "size of the sandbox's writable root, e.g. `2g` (default: the daemon's)")
	var labels cli.List
	fs.Var(&labels, "label", "tag the sandbox with `key=value` (repeatable)")
	snapshot := fs.String("snapshot", "", "start from the snapshot `SID` (hutch snapshots lists them): its base, with what its sandbox had written")
	review := fs.String("review-workspace", "", "review the host directory the operator bound as `NAME` (hutch serve --review-workspace): the sandbox's workspace shows it, and what it writes there is kept as a change set (hutch changes --remote)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: hutch create [flags]\n\nCreates a sandbox in the daemon at $HUTCH_HOST (default %s), with the token in $HUTCH_TOKEN,\nand prints its id. It takes the flags of hutch run; --timeout is the sandbox's lifetime,\n--debug prints the policy sent; --tier is the sandbox's isolation tier (default: the\ndaemon's, hutch serve --default-tier); --report is refused (a served sandbox's refused\nconnections are its events: hutch events ID), and so are --state-dir (its image comes\nfrom the daemon's store), --runsc, --gvisor-directfs and --allow-emulation (the daemon\nruns the tier).\n\nFlags:\n", client.DefaultHost)
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stderr); err != nil {
		return usageCode(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "hutch: create takes no arguments, got %q\n", fs.Args())
		return 2
	}
	if rf.Report != "" {
		fmt.Fprintln(stderr, "hutch: create: --report is for hutch run; a served sandbox's refused connections are its events: hutch events ID")
		return 2
	}
	if rf.Runsc != "" {
		fmt.Fprintln(stderr, "hutch: create: --runsc is for hutch run; a served sandbox's runtime is the daemon's")
		return 2
	}
	if rf.DirectFS {
		fmt.Fprintln(stderr, "hutch: create: --gvisor-directfs is for hutch run; a served sandbox's runtime is the daemon's")
		return 2
	}
	if rf.StateDir != "" {
		fmt.Fprintln(stderr, "hutch: create: --state-dir is for hutch run; a served sandbox's image comes from the daemon's store: hutch image pull --state-dir DIR with the daemon's state directory")
		return 2
	}
	if rf.Runsc != "" {
		fmt.Fprintln(stderr, "hutch: create: --runsc is for hutch run; the daemon runs a served sandbox's tier (--tier) with its own runtimes")
		return 2
	}
	if rf.AllowEmulation {
		fmt.Fprintln(stderr, "hutch: create: --allow-emulation is for hutch run; the daemon runs a served sandbox's tier (--tier) with its own runtimes: hutch serve --allow-emulation")
		return 2
	}
	opts := client.CreateOptions{IdleTimeout: *idle, Snapshot: *snapshot, ReviewWorkspace: *review}
	var err error
	if opts.Labels, err = keyValues("label", labels); err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return 2
	}
	if opts.UpstreamCA, err = upstreamPEM(rf.UpstreamCAs); err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return 2
	}
	spec, err := remoteSpec(rf)
	if err == nil {
		err = rf.RefuseReview(spec, "hutch create")
	}
	if err == nil && *disk != "" {
		if spec.Resources.DiskBytes, err = policy.ParseSize(*disk); err != nil {
			err = fmt.Errorf("--disk: %w", err)
		}
	}
	if err == nil {
		opts.Secrets, err = localSecrets(&spec)
	}
	// The lifetime and the variables travel as the request's own, which
	// leaves a policy of defaults that a warm sandbox can serve.
	opts.Timeout, spec.Resources.Timeout = spec.Resources.Timeout, 0
	opts.Env, spec.Env.Set = spec.Env.Set, nil
	if err == nil {
		opts.Policy, err = specJSON(spec)
	}
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return 2
	}
	if rf.Debug {
		fmt.Fprintf(stderr, "hutch: create: policy %s, lifetime %s, %d variables, %d secret values, %d bytes of upstream CA\n",
			opts.Policy, opts.Timeout, len(opts.Env), len(opts.Secrets), len(opts.UpstreamCA))
	}
	c, ok := newClient(stderr)
	if !ok {
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteTimeout)
	defer cancel()
	sb, err := c.Create(ctx, opts)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: create: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, sb.ID)
	return 0
}

// upstreamPEM reads the files of --upstream-ca, each of which must hold a
// PEM certificate, for the request.
func upstreamPEM(files []string) ([]byte, error) {
	pems, err := runner.ReadPEMs(files)
	if err != nil {
		return nil, err
	}
	var out []byte
	for i, p := range pems {
		if !x509.NewCertPool().AppendCertsFromPEM(p) {
			return nil, fmt.Errorf("--upstream-ca %s: no PEM certificate in it", files[i])
		}
		out = append(append(out, p...), '\n')
	}
	return out, nil
}

// remoteSpec is the policy of the flags and the policy or srt settings
// file, not normalized (the daemon does that): env.pass is resolved here,
// from this command's environment.
func remoteSpec(rf *runner.Flags) (policy.Spec, error) {
	s, _, err := rf.Policy()
	if err != nil {
		return s, err
	}
	for _, pat := range s.Env.Pass {
		for _, kv := range os.Environ() {
			name, value, _ := strings.Cut(kv, "=")
			prefix, wild := strings.CutSuffix(pat, "*")
			if name == pat || (wild && strings.HasPrefix(name, prefix)) {
				if s.Env.Set == nil {
					s.Env.Set = map[string]string{}
				}
				s.Env.Set[name] = value
			}
		}
	}
	s.Env.Pass = nil
	return s, nil
}

// localSecrets reads the real values of the policy's secrets from this
// command's environment (env:NAME, the default) or files (file:PATH); the
// request carries them (from: request).
func localSecrets(s *policy.Spec) (map[string]string, error) {
	if len(s.Secrets) == 0 {
		return nil, nil
	}
	values := map[string]string{}
	for i := range s.Secrets {
		sec := &s.Secrets[i]
		from := sec.From
		if from == "" {
			from = "env:" + sec.Name
		}
		kind, src, _ := strings.Cut(from, ":")
		switch kind {
		case "env":
			v, ok := os.LookupEnv(src)
			if !ok || v == "" {
				return nil, fmt.Errorf("secret %s: this command's environment has no %s (from: %s)", sec.Name, src, from)
			}
			values[sec.Name] = v
		case "file":
			b, err := os.ReadFile(src)
			if err != nil {
				return nil, fmt.Errorf("secret %s: %w", sec.Name, err)
			}
			values[sec.Name] = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		default:
			return nil, fmt.Errorf("secret %s: unknown source %q", sec.Name, from)
		}
		sec.From = policy.SecretFromRequest
	}
	return values, nil
}

// specJSON is s in the policy-file schema, as JSON.
func specJSON(s policy.Spec) (json.RawMessage, error) {
	y, err := s.Format()
	if err != nil {
		return nil, err
	}
	var v any
	if err := yaml.Unmarshal(y, &v); err != nil {
		return nil, fmt.Errorf("policy as JSON: %w", err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("policy as JSON: %w", err)
	}
	return out, nil
}

// commandArgs splits "ID [--] COMMAND..." .
func commandArgs(args []string) (id string, command []string) {
	if len(args) == 0 {
		return "", nil
	}
	id, command = args[0], args[1:]
	if len(command) > 0 && command[0] == "--" {
		command = command[1:]
	}
	return id, command
}

func cmdExec(args []string, stdin, stdout, stderr *os.File) int {
	fs := remoteFlags("exec", "[-i] [-t] [flags] ID -- COMMAND [ARGS...]", stderr)
	interactive := fs.Bool("i", false, "pass stdin to the command")
	tty := fs.Bool("t", false, "run the command on a terminal; when stdin is a terminal, the local one, in raw mode, with its input (as -it) and window size changes")
	var env cli.List
	fs.Var(&env, "env", "set `NAME=VALUE` for the command (repeatable)")
	dir := fs.String("cwd", "", "run the command in `dir` (default: the workspace)")
	timeout := fs.Duration("timeout", 0, "kill the command after this `duration` (exit 124)")
	if err := cli.Parse(fs, args, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return sandbox.ExitHutchError
	}
	id, command := commandArgs(fs.Args())
	if id == "" || len(command) == 0 {
		fmt.Fprintln(stderr, "hutch: usage: hutch exec [-i] [-t] ID -- COMMAND [ARGS...]")
		return sandbox.ExitHutchError
	}
	envMap, err := keyValues("env", env)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return sandbox.ExitHutchError
	}
	c, ok := newClient(stderr)
	if !ok {
		return sandbox.ExitHutchError
	}
	// On a terminal, -t alone forwards the terminal's input too: a
	// terminal that swallows every key (and, raw, Ctrl-C with them) is
	// never what someone at the keyboard wants. Without a terminal on
	// stdin, -t alone gives the command a terminal but no input, as
	// docker exec -t does.
	localTTY := *tty && sandbox.IsTerminal(stdin)
	cmd := client.Command{Args: command, Env: envMap, Dir: *dir, Stdin: *interactive || localTTY, TTY: *tty, Timeout: *timeout}
	if localTTY {
		cmd.Rows, cmd.Cols, _ = sandbox.TerminalSize(stdin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteTimeout)
	stopAsking := awaitApprovals(c, id, command, envMap, stderr)
	p, err := c.Exec(ctx, id, cmd)
	stopAsking()
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "hutch: exec: %v\n", err)
		switch {
		case errors.Is(err, client.ErrNotApproved):
			return 126
		case errors.Is(err, client.ErrNotFound) && strings.Contains(err.Error(), "command not found"):
			return 127
		case errors.Is(err, client.ErrPermission):
			return 126
		}
		return sandbox.ExitHutchError
	}
	defer p.Close()

	sigs := []os.Signal{syscall.SIGTERM, syscall.SIGHUP}
	if !localTTY {
		sigs = append(sigs, syscall.SIGINT, syscall.SIGQUIT)
	}
	fwd := make(chan os.Signal, 4)
	signal.Notify(fwd, sigs...)
	defer signal.Stop(fwd)
	go func() {
		for s := range fwd {
			_ = p.Signal(s.(syscall.Signal))
		}
	}()
	if localTTY {
		if restore, err := sandbox.RawTerminal(stdin); err == nil {
			defer restore()
		}
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			for range winch {
				if rows, cols, err := sandbox.TerminalSize(stdin); err == nil {
					_ = p.Resize(rows, cols)
				}
			}
		}()
	}
	if p.Stdin != nil {
		go func() {
			_, _ = io.Copy(p.Stdin, stdin)
			_ = p.Stdin.Close()
		}()
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(stdout, p.Stdout)
	}()
	go func() {
		defer wg.Done()
		_, _ = io.Copy(stderr, p.Stderr)
	}()
	wg.Wait()
	st, err := p.Wait()
	if err != nil {
		fmt.Fprintf(stderr, "hutch: exec: %v\n", err)
		return sandbox.ExitHutchError
	}
	if st.TimedOut {
		fmt.Fprintf(stderr, "hutch: the command timed out after %s and was killed\n", *timeout)
		return 124
	}
	return st.Code
}

func cmdLs(args []string, stdout, stderr io.Writer) int {
	fs := remoteFlags("ls", "[--label key=value]... [--state STATE] [-q]", stderr)
	var labels cli.List
	fs.Var(&labels, "label", "only sandboxes with the label `key=value` (repeatable)")
	state := fs.String("state", "", "only sandboxes in `state` (starting, running, stopping, stopped)")
	quiet := fs.Bool("q", false, "print the ids only")
	if err := cli.Parse(fs, args, stderr); err != nil {
		return usageCode(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "hutch: ls takes no arguments, got %q\n", fs.Args())
		return 2
	}
	lm, err := keyValues("label", labels)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return 2
	}
	c, ok := newClient(stderr)
	if !ok {
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteTimeout)
	defer cancel()
	sbs, err := c.List(ctx, client.ListOptions{Labels: lm, State: *state})
	if err != nil {
		fmt.Fprintf(stderr, "hutch: ls: %v\n", err)
		return 1
	}
	if *quiet {
		for _, sb := range sbs {
			fmt.Fprintln(stdout, sb.ID)
		}
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tTIER\tIMAGE\tCREATED\tEXPIRES\tLABELS")
	for _, sb := range sbs {
		keys := make([]string, 0, len(sb.Labels))
		for k := range sb.Labels {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			keys[i] = k + "=" + sb.Labels[k]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sb.ID, sb.State, cmp.Or(sb.Tier, "-"), shortDigest(sb.Image),
			sb.CreatedAt.Local().Format(time.DateTime), sb.ExpiresAt.Local().Format(time.DateTime), strings.Join(keys, ","))
	}
	_ = tw.Flush()
	return 0
}

// shortDigest is how hutch ls shows an image's digest: its first 12 hex
// digits ("sha256:0123456789ab"), "-" for the host's root.
func shortDigest(d string) string {
	if d == "" {
		return "-"
	}
	if alg, hex, ok := strings.Cut(d, ":"); ok && len(hex) > 12 {
		return alg + ":" + hex[:12]
	}
	return d
}

// remoteOperand splits "ID:PATH"; ok is false for a local path (one with a
// slash before its first colon, or no colon).
func remoteOperand(s string) (id, p string, ok bool) {
	i := strings.IndexByte(s, ':')
	if i <= 0 || strings.ContainsRune(s[:i], '/') {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// remotePath makes p absolute in the sandbox: relative paths are in its
// workspace. Nothing is cleaned: a ".." goes to the daemon, which refuses
// it.
func remotePath(ctx context.Context, c *client.Client, id, p string) (string, error) {
	if strings.HasPrefix(p, "/") {
		return p, nil
	}
	sb, err := c.Get(ctx, id)
	if err != nil {
		return "", err
	}
	if p == "" || p == "." {
		return sb.Workspace, nil
	}
	return strings.TrimSuffix(sb.Workspace, "/") + "/" + p, nil
}

func cmdCp(args []string, stdout, stderr io.Writer) int {
	fs := remoteFlags("cp", "SRC ID:DST | ID:SRC DST", stderr)
	if err := cli.Parse(fs, args, stderr); err != nil {
		return usageCode(err)
	}
	if fs.NArg() != 2 {
		fmt.Fprintln(stderr, "hutch: usage: hutch cp SRC ID:DST | hutch cp ID:SRC DST (DST - for stdout)")
		return 2
	}
	src, dst := fs.Arg(0), fs.Arg(1)
	sid, spath, sremote := remoteOperand(src)
	did, dpath, dremote := remoteOperand(dst)
	if sremote == dremote {
		fmt.Fprintln(stderr, "hutch: cp: exactly one of SRC and DST must be ID:PATH")
		return 2
	}
	c, ok := newClient(stderr)
	if !ok {
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var err error
	if dremote {
		err = upload(ctx, c, src, did, dpath)
	} else {
		err = download(ctx, c, sid, spath, dst, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "hutch: cp: %v\n", err)
		return 1
	}
	return 0
}

// upload copies the local file or directory src to dst in sandbox id;
// when dst is a directory there, into it.
func upload(ctx context.Context, c *client.Client, src, id, dst string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if dst, err = remotePath(ctx, c, id, dst); err != nil {
		return err
	}
	if st, err := c.Stat(ctx, id, dst); err == nil && st.IsDir {
		dst = strings.TrimSuffix(dst, "/") + "/" + filepath.Base(filepath.Clean(src))
	}
	if !fi.IsDir() {
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = c.WriteFile(ctx, id, dst, f, fi.Mode().Perm())
		return err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, src)) }()
	_, err = c.Upload(ctx, id, dst, pr)
	pr.CloseWithError(errors.New("upload ended"))
	return err
}

// writeTar writes the directory dir as a tar stream, entries relative to
// it, symlinks as symlinks; devices, pipes and sockets are left out.
func writeTar(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		case !info.Mode().IsRegular() && !info.IsDir():
			return nil
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// download copies the file or directory src of sandbox id to the local
// dst; when dst is a directory, into it; "-" writes a file to stdout.
func download(ctx context.Context, c *client.Client, id, src, dst string, stdout io.Writer) error {
	src, err := remotePath(ctx, c, id, src)
	if err != nil {
		return err
	}
	st, err := c.Stat(ctx, id, src)
	if err != nil {
		return err
	}
	if dst == "-" {
		if st.IsDir {
			return fmt.Errorf("%s is a directory; cannot write it to stdout", src)
		}
		_, err := c.ReadFile(ctx, id, src, stdout)
		return err
	}
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
		dst = filepath.Join(dst, path.Base(src))
	}
	// What comes out of a sandbox grants nothing on the host: no set-id
	// bit, the local umask, never writable by others (hostperm).
	umask := hostperm.Umask()
	if !st.IsDir {
		return downloadFile(ctx, c, id, src, dst, hostperm.Mode(st.Mode, umask))
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(c.Download(ctx, id, src, pw)) }()
	err = extractTar(pr, dst, umask)
	pr.CloseWithError(errors.New("extraction ended"))
	return err
}

// downloadFile writes a file of the sandbox to dst through a temporary
// file, renamed into place once complete.
func downloadFile(ctx context.Context, c *client.Client, id, src, dst string, perm fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".hutch-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := c.ReadFile(ctx, id, src, f); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), dst)
}

// extractTar writes a tar stream into dir. Everything goes through an
// os.Root, so no entry — whatever its name, and whatever symlinks earlier
// entries made — lands outside dir; absolute names and ".." are refused
// outright. Modes follow hostperm.Mode for umask: no set-id or sticky
// bit, never writable by others; directories stay the user's to enter
// and write.
func extractTar(r io.Reader, dir string, umask fs.FileMode) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(hdr.Name)
		if path.IsAbs(hdr.Name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("archive entry %q leaves the directory", hdr.Name)
		}
		if name == "." {
			continue
		}
		if dir := path.Dir(name); dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				return err
			}
		}
		perm := hostperm.Mode(hdr.FileInfo().Mode(), umask)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return err
			}
			if err := root.Chmod(name, perm|0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			if err := root.Chmod(name, perm); err != nil {
				return err
			}
		case tar.TypeSymlink:
			_ = root.Remove(name)
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return err
			}
		}
	}
}
