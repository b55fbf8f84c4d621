package api

import (
	"net/http"

	"github.com/hutch-sandbox/hutch/internal/approve"
	"github.com/hutch-sandbox/hutch/internal/daemon"
)

// CodeNotApproved is the code of a command the sandbox's approvals
// refused (403): a deny rule, a person's answer, or a question that
// expired. The message says which rule and how to allow it.
const CodeNotApproved = "not_approved"

// ApprovalsResponse answers GET /v1/approvals.
type ApprovalsResponse struct {
	// Approvals are the questions waiting for the tenant's answer,
	// oldest first.
	Approvals []approve.Pending `json:"approvals"`
}

// AnswerBody is the body of POST /v1/approvals/{aid}.
type AnswerBody struct {
	// Answer is "once", "run" (for the rest of the sandbox's life),
	// "always" (on hutch serve: for the sandbox's life too, there being
	// no policy file to write it to) or "deny".
	Answer string `json:"answer"`
}

// approver is the manager's approvals, or an error (501) for one
// without.
func (h *handler) approver() (daemon.Approver, error) {
	a, ok := h.m.(daemon.Approver)
	if !ok {
		return nil, errorf(daemon.ErrUnsupported, "this daemon holds no approvals")
	}
	return a, nil
}

// listApprovals answers GET /v1/approvals[?sandbox=ID].
func (h *handler) listApprovals(w http.ResponseWriter, r *http.Request) error {
	q, err := query(r, "sandbox")
	if err != nil {
		return err
	}
	a, err := h.approver()
	if err != nil {
		return err
	}
	list := a.Approvals(tenantOf(r), q.Get("sandbox"))
	if list == nil {
		list = []approve.Pending{}
	}
	writeJSON(w, http.StatusOK, ApprovalsResponse{Approvals: list})
	return nil
}

// getApproval answers GET /v1/approvals/{aid}.
func (h *handler) getApproval(w http.ResponseWriter, r *http.Request) error {
	if _, err := query(r); err != nil {
		return err
	}
	a, err := h.approver()
	if err != nil {
		return err
	}
	p, err := a.Approval(tenantOf(r), r.PathValue("aid"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

// answerApproval answers POST /v1/approvals/{aid}: the question's command
// or connection goes on (or is refused) at once.
func (h *handler) answerApproval(w http.ResponseWriter, r *http.Request) error {
	if _, err := query(r); err != nil {
		return err
	}
	var b AnswerBody
	if err := decodeJSON(w, r, &b, false); err != nil {
		return err
	}
	ans, err := approve.ParseAnswer(b.Answer)
	if err != nil {
		return errorf(daemon.ErrInvalid, "answer: %v", err)
	}
	a, err := h.approver()
	if err != nil {
		return err
	}
	id := r.PathValue("aid")
	e := auditEntry(r)
	e.Subject = id
	if p, err := a.Approval(tenantOf(r), id); err == nil {
		e.Sandbox = p.Sandbox
	}
	if err := a.AnswerApproval(tenantOf(r), id, ans, answeredBy(r)); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"id": id, "answer": string(ans)})
	return nil
}

// answeredBy says who answers through r: "web" for the web UI's pages
// (authenticated by its cookie), else "api".
func answeredBy(r *http.Request) string {
	if r.Header.Get("Authorization") == "" {
		if _, err := r.Cookie(UICookie); err == nil {
			return "web"
		}
	}
	return "api"
}
