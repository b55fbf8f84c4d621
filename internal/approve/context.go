package approve

import "context"

// AskerFrom returns the Asker WithAsker put in ctx, if any: for a front
// end that has no Broker and asks only the caller's own way (hutch mcp
// over stdio, whose MCP client alone can answer).
func AskerFrom(ctx context.Context) (Asker, bool) {
	a, ok := ctx.Value(askerKey{}).(Asker)
	return a, ok && a != nil
}
