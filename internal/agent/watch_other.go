//go:build !linux

package agent

func (s *server) watch(r *areq, _ string, _ bool) {
	s.replyErr(r.id, errorf(CodeInternal, "watch: %v", ErrNotSupported))
}
