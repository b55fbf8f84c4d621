package client_test

import (
	"context"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/client"
)

// TestCreateTier: CreateOptions.Tier is the policy's tier, which the
// answer's Tier says (the test's daemon records what it was asked for;
// package api's tests run a real daemon); no tier is the daemon's
// default; a policy that names another tier is refused before a request.
func TestCreateTier(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var c client.Client
	for _, o := range []struct {
		opts client.CreateOptions
		want string
	}{
		{client.CreateOptions{}, "namespace"},
		{client.CreateOptions{Tier: "gvisor"}, "gvisor"},
		{client.CreateOptions{Tier: "gvisor", Policy: []byte(`{"tier":"gvisor","resources":{"pids":64}}`)}, "gvisor"},
	} {
		sb, err := c.Create(ctx, o.opts)
		if err != nil {
			t.Fatalf("create %+v: %v", o.opts, err)
		}
		if sb.Tier != o.want {
			t.Errorf("create %+v: tier %q, want %q", o.opts, sb.Tier, o.want)
		}
		if got, err := c.Get(ctx, sb.ID); err != nil || got.Tier != o.want {
			t.Errorf("get: %+v, %v", got, err)
		}
		if err := c.Destroy(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.Create(ctx, client.CreateOptions{Tier: "gvisor", Policy: []byte(`{"tier":"namespace"}`)})
	if err == nil || !strings.Contains(err.Error(), `the tier gvisor and the policy's tier "namespace": give one of them`) {
		t.Errorf("a tier and a policy of another: %v", err)
	}
}
