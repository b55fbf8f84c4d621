package interp

import (
	"context"
	"errors"
)

// startNode starts the engine of a JavaScript or TypeScript context in dir.
func (s *Server) startNode(ctx context.Context, lang, dir string) (Engine, error) {
	return nil, errors.New("the JavaScript engine is not built in yet")
}
