package runner

import (
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// defaultImageRootSize bounds what a sandbox from an image writes to its
// root when --tmp-size does not say.
const defaultImageRootSize = 1 << 30

// imageRoot finds the image spec's root names in the image store of the
// state directory dir, pulling it first (hutch-serve pulls, with its
// progress on stderr when that is a terminal) when the store lacks it, and
// returns the sandbox's root, the image, which it marks in use (no prune
// or eviction removes its layers) until release is called, and its user
// (resolved in the image's own /etc/passwd), who the command runs as.
func imageRoot(spec policy.Spec, dir string, stderr io.Writer) (root *sandbox.ImageRoot, img *image.Image, user image.User, release func(), err error) {
	ref, _ := spec.Image()
	st, err := image.Open(dir)
	if err != nil {
		return nil, nil, image.User{}, nil, err
	}
	img, err = st.Get(ref)
	if errors.Is(err, image.ErrNotFound) {
		fmt.Fprintf(stderr, "hutch: %s is not in the image store (%s): pulling it\n", ref, dir)
		bin, ferr := FindServe()
		if ferr != nil {
			return nil, nil, image.User{}, nil, ferr
		}
		cmd := exec.Command(bin, "image", "pull", ref, "--state-dir", dir)
		cmd.Stdout, cmd.Stderr = io.Discard, stderr
		if rerr := cmd.Run(); rerr != nil {
			return nil, nil, image.User{}, nil, fmt.Errorf("pull %s: %w", ref, rerr)
		}
		img, err = st.Get(ref)
	}
	if err != nil {
		return nil, nil, image.User{}, nil, err
	}
	root = &sandbox.ImageRoot{SizeBytes: spec.Resources.TmpBytes}
	if root.SizeBytes <= 0 {
		root.SizeBytes = defaultImageRootSize
	}
	if user, err = st.User(img); err != nil {
		return nil, nil, image.User{}, nil, err
	}
	root.UID, root.GID, root.Groups = user.UID, user.GID, user.Groups
	if root.Layers, release, err = st.Stack(img); err != nil {
		return nil, nil, image.User{}, nil, err
	}
	return root, img, user, release, nil
}

// imageEnv is the environment of a sandbox from img: the image's own,
// with what the policy passes and sets on top — but for the variables
// that describe the host's user and its programs (PATH, HOME, SHELL,
// USER, LOGNAME), which are the image's unless the policy sets them: HOME
// the image user's home (from its passwd) unless the image's environment
// names one, as Docker does, USER and LOGNAME its name.
func imageEnv(img *image.Image, user image.User, spec policy.Spec, environ []string) []string {
	out := slices.Clone(img.Config.Env)
	set := func(kv string) {
		k, _, _ := strings.Cut(kv, "=")
		for i, e := range out {
			if ek, _, _ := strings.Cut(e, "="); ek == k {
				out[i] = kv
				return
			}
		}
		out = append(out, kv)
	}
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if _, explicit := spec.Env.Set[k]; !explicit && slices.Contains([]string{"PATH", "HOME", "SHELL", "USER", "LOGNAME"}, k) {
			continue
		}
		set(kv)
	}
	if !slices.ContainsFunc(out, func(e string) bool { return strings.HasPrefix(e, "PATH=") }) {
		out = append(out, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	add := func(k, v string) {
		if !slices.ContainsFunc(out, func(e string) bool { return strings.HasPrefix(e, k+"=") }) {
			out = append(out, k+"="+v)
		}
	}
	add("HOME", user.Home)
	if user.Name != "" {
		add("USER", user.Name)
		add("LOGNAME", user.Name)
	}
	return out
}

// imageCommand is the command of a sandbox from img when none is given:
// the image's entrypoint and command.
func imageCommand(img *image.Image) []string {
	return append(slices.Clone(img.Config.Entrypoint), img.Config.Cmd...)
}
