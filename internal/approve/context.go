package approve

import "context"

// AskerFrom returns the Asker WithAsker put in ctx, if any: for a front
// end that has no Broker and asks only the caller's own way (hutch mcp
// over stdio, whose MCP client alone can answer).
func AskerFrom(ctx context.Context) (Asker, bool) {
	a, ok := ctx.Value(askerKey{}).(Asker)
	return a, ok && a != nil
}

// ContextAsker asks the Asker of the question's context (WithAsker);
// without one, no one can be asked and the question is refused at once
// (By "nobody", which the Gate's NoAsker explains).
var ContextAsker Asker = AskerFunc(func(ctx context.Context, r Request) Reply {
	a, ok := AskerFrom(ctx)
	if !ok {
		return Reply{Answer: AnswerDeny, By: "nobody"}
	}
	return a.Ask(ctx, r)
})
