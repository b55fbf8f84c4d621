package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/client"
)

func TestEvents(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var c client.Client
	sb, err := c.Create(ctx, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Run(ctx, sb.ID, client.Command{Args: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	var types []string
	for ev, err := range c.Events(ctx, sb.ID, 0) {
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, ev.Type)
		if ev.Type == client.EventExec && ev.Data["pid"] != float64(res.PID) {
			t.Errorf("exec event %+v, want pid %d", ev, res.PID)
		}
	}
	if got := strings.Join(types, ","); got != "created,started,exec,exit,destroyed,ended" {
		t.Errorf("events %s", got)
	}
	for ev, err := range c.Events(ctx, "sb-nope", 0) {
		if !errors.Is(err, client.ErrNotFound) {
			t.Errorf("events of no sandbox: %+v, %v", ev, err)
		}
	}
}
