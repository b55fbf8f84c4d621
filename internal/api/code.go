package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/interp"
)

// CodeBody is the body of POST /v1/sandboxes/{id}/code.
type CodeBody struct {
	// Code is what to run.
	Code string `json:"code"`
	// Language names the language whose default context runs it;
	// Context a context (CreateCodeContext) instead. Neither: Python's
	// default context.
	Language string `json:"language,omitempty"`
	Context  string `json:"context,omitempty"`
	// Env is set for this execution only.
	Env map[string]string `json:"env,omitempty"`
}

// CodeContextBody is the body of POST /v1/sandboxes/{id}/code/contexts.
type CodeContextBody struct {
	// Language is the context's language ("" = python).
	Language string `json:"language,omitempty"`
	// Cwd is its working directory, absolute ("" = the user's home).
	Cwd string `json:"cwd,omitempty"`
}

// codeNoted bounds the code an event of an execution tells of.
const codeNoted = 120

// Interpreters is what the code routes need of the daemon beyond
// Manager: *daemon.Manager has it. A Manager without it answers them
// not_implemented.
type Interpreters interface {
	// Interpreter is a client of the code interpreter of tenant's
	// sandbox id (daemon.ErrNoInterpreter when its image has no
	// kernels).
	Interpreter(ctx context.Context, tenant, id string) (*interp.Client, error)
}

var _ Interpreters = (*daemon.Manager)(nil)

// interpreterFor is the code interpreter of the request's sandbox.
func (h *handler) interpreterFor(r *http.Request) (*interp.Client, error) {
	im, ok := h.m.(Interpreters)
	if !ok {
		return nil, errorf(daemon.ErrUnsupported, "this daemon runs no code interpreter")
	}
	return im.Interpreter(r.Context(), tenantOf(r), r.PathValue("id"))
}

// interpError is the API's error for a refusal of the code interpreter.
func interpError(err error) error {
	var se *interp.StatusError
	if !errors.As(err, &se) {
		return err
	}
	msg := "code interpreter: " + se.Message
	switch se.Status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return errorf(daemon.ErrInvalid, "%s", msg)
	case http.StatusNotFound:
		return errorf(daemon.ErrNotFound, "%s", msg)
	}
	// A kernel that could not start (a language without one, say).
	return errorf(daemon.ErrUnavailable, "%s", msg)
}

func (h *handler) runCode(w http.ResponseWriter, r *http.Request) error {
	var b CodeBody
	if err := decodeBody(w, r, &b, false); err != nil {
		return err
	}
	switch {
	case b.Code == "":
		return errorf(daemon.ErrInvalid, "code: required")
	case b.Context != "" && b.Language != "":
		return errorf(daemon.ErrInvalid, "context, language: give one of them (a context has its language)")
	}
	if err := checkEnv("env", b.Env); err != nil {
		return err
	}
	ic, err := h.interpreterFor(r)
	if err != nil {
		return err
	}
	start := time.Now()
	st, err := ic.Stream(r.Context(), interp.ExecuteRequest{Code: b.Code, ContextID: b.Context, Language: b.Language, EnvVars: b.Env})
	if err != nil {
		return interpError(err)
	}
	defer st.Close()
	rc := startNDJSON(w)
	var out int64
	var raised string
	var failed error
	for {
		ev, err := st.Next()
		if err != nil {
			failed = err
			break
		}
		line, err := json.Marshal(ev)
		if err != nil {
			continue // a type this daemon does not know
		}
		switch ev.Type {
		case interp.EventStdout, interp.EventStderr:
			out += int64(len(ev.Text))
		case interp.EventError:
			raised = ev.Error.Name
		}
		if _, err := w.Write(append(line, '\n')); err != nil {
			failed = err
			break
		}
		_ = rc.Flush()
		if ev.Type == interp.EventEnd {
			break
		}
	}
	d := time.Since(start)
	h.met.ran(tenantOf(r), "code", d)
	h.emitCode(r, b, d, raised, failed)
	e := auditEntry(r)
	e.DurationMS = d.Milliseconds()
	e.BytesIn, e.BytesOut = int64(len(b.Code)), out
	if failed != nil {
		// The answer ends without its end_of_execution line: the
		// client sees that it broke off.
		_, e.Error = classify(failed)
		h.log.Debug("code execution broke off", "sandbox", r.PathValue("id"), "err", failed)
	}
	return nil
}

// emitCode records an execution in the sandbox's events: its language
// or context, how long it took, the exception it raised, and the first
// bytes of its code.
func (h *handler) emitCode(r *http.Request, b CodeBody, d time.Duration, raised string, failed error) {
	code := b.Code
	if len(code) > codeNoted {
		code = strings.ToValidUTF8(code[:codeNoted], "") + "…"
	} else if !utf8.ValidString(code) {
		code = strings.ToValidUTF8(code, "")
	}
	data := map[string]any{"language": interp.Normalize(b.Language), "duration_ms": d.Milliseconds(), "code": code}
	if b.Context != "" {
		data["context"] = b.Context
		delete(data, "language")
	}
	if raised != "" {
		data["error"] = raised
	}
	if failed != nil {
		_, data["failed"] = classify(failed)
	}
	h.m.Emit(tenantOf(r), r.PathValue("id"), daemon.EventCodeExecuted, data)
}

func (h *handler) listCodeContexts(w http.ResponseWriter, r *http.Request) error {
	if _, err := query(r); err != nil {
		return err
	}
	ic, err := h.interpreterFor(r)
	if err != nil {
		return err
	}
	cs, err := ic.Contexts(r.Context())
	if err != nil {
		return interpError(err)
	}
	if cs == nil {
		cs = []interp.Context{}
	}
	writeJSON(w, http.StatusOK, cs)
	return nil
}

func (h *handler) createCodeContext(w http.ResponseWriter, r *http.Request) error {
	var b CodeContextBody
	if err := decodeBody(w, r, &b, true); err != nil {
		return err
	}
	if b.Cwd != "" {
		if err := checkPath("cwd", b.Cwd); err != nil {
			return err
		}
	}
	ic, err := h.interpreterFor(r)
	if err != nil {
		return err
	}
	c, err := ic.CreateContext(r.Context(), interp.CreateContextRequest{Language: b.Language, Cwd: b.Cwd})
	if err != nil {
		return interpError(err)
	}
	auditEntry(r).Subject = c.ID
	writeJSON(w, http.StatusCreated, c)
	return nil
}

func (h *handler) removeCodeContext(w http.ResponseWriter, r *http.Request) error {
	return h.codeContextCall(w, r, (*interp.Client).RemoveContext)
}

func (h *handler) restartCodeContext(w http.ResponseWriter, r *http.Request) error {
	return h.codeContextCall(w, r, (*interp.Client).RestartContext)
}

// codeContextCall makes call on the request's context and answers 204.
func (h *handler) codeContextCall(w http.ResponseWriter, r *http.Request, call func(*interp.Client, context.Context, string) error) error {
	if _, err := query(r); err != nil {
		return err
	}
	id := r.PathValue("ctx")
	auditEntry(r).Subject = id
	ic, err := h.interpreterFor(r)
	if err != nil {
		return err
	}
	if err := call(ic, r.Context(), id); err != nil {
		return interpError(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
