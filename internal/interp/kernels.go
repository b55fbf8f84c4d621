package interp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/kernel"
)

// The languages the interpreter knows by name. Any other name is looked
// up as a Jupyter kernel of that name.
const (
	Python     = "python"
	JavaScript = "javascript"
	TypeScript = "typescript"
	R          = "r"
)

// Normalize is the language a context of name runs: lower case, "js" and
// "ts" the short forms, "" Python — E2B's names.
func Normalize(name string) string {
	name = strings.ToLower(strings.TrimSpace(name))
	switch name {
	case "":
		return Python
	case "js":
		return JavaScript
	case "ts":
		return TypeScript
	}
	return name
}

// maxLanguage bounds a language's name.
const maxLanguage = 64

// checkLanguage refuses a name no kernel could have.
func checkLanguage(name string) error {
	if len(name) > maxLanguage || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789._-+") != "" {
		return fmt.Errorf("language %.80q: want a language's name (letters, digits, '.', '_', '-', '+'; at most %d characters)", name, maxLanguage)
	}
	return nil
}

// specNames are the Jupyter kernel names tried for a language, in order.
func specNames(lang string) []string {
	switch lang {
	case Python:
		return []string{"python3", "python"}
	case R:
		return []string{"ir", "r"}
	}
	return []string{lang}
}

// kernelSpec is a Jupyter kernel's kernel.json.
type kernelSpec struct {
	Argv     []string          `json:"argv"`
	Env      map[string]string `json:"env"`
	Language string            `json:"language"`
}

// maxSpec bounds a kernel.json.
const maxSpec = 64 << 10

// kernelDirs are where Jupyter kernels are looked up, Jupyter's order:
// JUPYTER_PATH, the user's, then the system's.
func kernelDirs(env []string, home string) []string {
	var dirs []string
	if p := lookupEnv(env, "JUPYTER_PATH"); p != "" {
		for _, d := range filepath.SplitList(p) {
			if filepath.IsAbs(d) {
				dirs = append(dirs, filepath.Join(d, "kernels"))
			}
		}
	}
	if data := lookupEnv(env, "XDG_DATA_HOME"); filepath.IsAbs(data) {
		dirs = append(dirs, filepath.Join(data, "jupyter", "kernels"))
	} else if home != "" {
		dirs = append(dirs, filepath.Join(home, ".local", "share", "jupyter", "kernels"))
	}
	return append(dirs, "/usr/local/share/jupyter/kernels", "/usr/share/jupyter/kernels")
}

// findSpec finds the Jupyter kernel of lang.
func findSpec(lang string, env []string, home string) (*kernelSpec, error) {
	for _, name := range specNames(lang) {
		for _, d := range kernelDirs(env, home) {
			s, err := readSpec(filepath.Join(d, name, "kernel.json"))
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, err
			}
			return s, nil
		}
	}
	return nil, fmt.Errorf("no kernel for language %q: no Jupyter kernel %s is installed (%s)", lang,
		strings.Join(specNames(lang), " or "), strings.Join(kernelDirs(env, home), ", "))
}

func readSpec(path string) (*kernelSpec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSpec+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxSpec {
		return nil, fmt.Errorf("%s: over %d bytes", path, maxSpec)
	}
	var s kernelSpec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if len(s.Argv) == 0 || !slices.ContainsFunc(s.Argv, func(a string) bool { return strings.Contains(a, kernel.ConnectionFileArg) }) {
		return nil, fmt.Errorf("%s: argv has no %s", path, kernel.ConnectionFileArg)
	}
	return &s, nil
}

func lookupEnv(env []string, name string) string {
	v, _ := lookupEnvOK(env, name)
	return v
}

// setEnv returns env with name set to value.
func setEnv(env []string, name, value string) []string {
	out := slices.DeleteFunc(slices.Clone(env), func(e string) bool { return strings.HasPrefix(e, name+"=") })
	return append(out, name+"="+value)
}

// KernelOOMScoreAdj is the OOM score adjustment of every kernel the
// server starts: the highest, so that code which takes the sandbox's
// memory gets its kernel killed — the context restarts — and not the
// server or the sandbox's other processes.
const KernelOOMScoreAdj = 1000

// startJupyter starts the Jupyter kernel of lang in dir. A Python kernel
// (ipykernel) runs the startup file and prints without colours or
// truncation.
func (s *Server) startJupyter(ctx context.Context, lang, dir string) (Engine, error) {
	env := s.environ()
	spec, err := findSpec(lang, env, s.home)
	if err != nil {
		return nil, err
	}
	for k, v := range spec.Env {
		env = setEnv(env, k, v)
	}
	argv := slices.Clone(spec.Argv)
	if slices.Contains(argv, "ipykernel_launcher") {
		env = setEnv(env, "PYDEVD_DISABLE_FILE_VALIDATION", "1")
		argv = append(argv, "--InteractiveShell.colors=NoColor", "--PlainTextFormatter.max_seq_length=0",
			"--IPKernelApp.exec_files="+s.startup)
	}
	return kernel.Start(ctx, kernel.Config{Argv: argv, Dir: dir, Env: env, Log: s.kernelLog, OOMScoreAdj: KernelOOMScoreAdj})
}

// envCode returns the code that sets (set) or removes (value nil) the
// environment variable name in a context of lang, with the value as a
// JSON string literal (which Python, JavaScript and R read as the same
// string), or false when lang has no way known here.
func envCode(lang, name string, value *string) (string, bool) {
	lit := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	switch lang {
	case Python:
		if value == nil {
			return "__import__('os').environ.pop(" + lit(name) + ", None)", true
		}
		return "__import__('os').environ[" + lit(name) + "] = " + lit(*value), true
	case JavaScript, TypeScript:
		if value == nil {
			return "delete process.env[" + lit(name) + "]", true
		}
		return "process.env[" + lit(name) + "] = " + lit(*value), true
	case R:
		if value == nil {
			return "Sys.unsetenv(" + lit(name) + ")", true
		}
		return "do.call(Sys.setenv, setNames(list(" + lit(*value) + "), " + lit(name) + "))", true
	}
	return "", false
}

// startNode starts the engine of a JavaScript or TypeScript context in
// dir: hutch's own, on node (Node).
func (s *Server) startNode(ctx context.Context, lang, dir string) (Engine, error) {
	return StartNode(ctx, NodeConfig{Node: s.node, Dir: dir, Env: s.environ(), TypeScript: lang == TypeScript,
		Log: s.kernelLog, OOMScoreAdj: KernelOOMScoreAdj})
}
