package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

type echoIn struct {
	A    int    `json:"a" jsonschema:"a number"`
	B    string `json:"b,omitempty"`
	Fail bool   `json:"fail,omitempty"`
}

type echoOut struct {
	Twice int `json:"twice"`
}

// TestAddTool: addTool's tools keep the contract sdk.AddTool gave them —
// schemas inferred from the types, structured output with its text, and
// every bad argument or failure a tool error the model reads, on a
// connection that stays usable — without validating each call against
// the schemas.
func TestAddTool(t *testing.T) {
	s := sdk.NewServer(&sdk.Implementation{Name: "t", Version: "1"}, nil)
	addTool(s, &sdk.Tool{Name: "echo", Description: "doubles a"}, func(_ context.Context, _ *sdk.CallToolRequest, in echoIn) (*sdk.CallToolResult, echoOut, error) {
		if in.Fail {
			return nil, echoOut{}, errors.New("asked to fail")
		}
		return nil, echoOut{Twice: 2 * in.A}, nil
	})
	ct, st := sdk.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	list, err := cs.ListTools(ctx, nil)
	if err != nil || len(list.Tools) != 1 {
		t.Fatalf("tools/list: %v, %v", list, err)
	}
	schema, _ := json.Marshal(list.Tools[0].InputSchema)
	for _, want := range []string{`"a":{`, `"description":"a number"`, `"required":["a"]`, `"additionalProperties":false`} {
		if !strings.Contains(string(schema), want) {
			t.Errorf("input schema %s lacks %s", schema, want)
		}
	}
	if list.Tools[0].OutputSchema == nil {
		t.Error("no output schema")
	}

	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"a": 21}})
	if err != nil || res.IsError {
		t.Fatalf("echo: %v, %v", res, err)
	}
	if got, _ := json.Marshal(res.StructuredContent); string(got) != `{"twice":42}` {
		t.Errorf("structured content %s, want {\"twice\":42}", got)
	}
	if tc, ok := res.Content[0].(*sdk.TextContent); !ok || tc.Text != `{"twice":42}` {
		t.Errorf("text content %#v", res.Content)
	}
	for _, c := range []struct {
		args any
		want string
	}{
		{map[string]any{"a": "x"}, "cannot unmarshal"},
		{map[string]any{"a": 1, "c": 2}, `unknown field "c"`},
		{map[string]any{"a": 1, "fail": true}, "asked to fail"},
	} {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: c.args})
		if err != nil {
			t.Fatalf("%v: a protocol error, not a tool error: %v", c.args, err)
		}
		if !res.IsError || !strings.Contains(resultText(res), c.want) {
			t.Errorf("%v: %v %q, want a tool error saying %q", c.args, res.IsError, resultText(res), c.want)
		}
	}
	if err := cs.Ping(ctx, nil); err != nil {
		t.Errorf("the connection after tool errors: %v", err)
	}
}
