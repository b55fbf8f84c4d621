package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/client"
)

func TestPauseResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tokA, err := testManager.Store().CreateToken(ctx, "pause-a")
	if err != nil {
		t.Fatal(err)
	}
	tokB, err := testManager.Store().CreateToken(ctx, "pause-b")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := client.New(testTCP, tokA)
	b, _ := client.New(testTCP, tokB)
	sb := newSandbox(t, a)
	if _, err := b.Pause(ctx, sb.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("tenant b pauses a's sandbox: %v", err)
	}
	got, err := a.Pause(ctx, sb.ID)
	if err != nil || got.ID != sb.ID || got.State != "paused" {
		t.Fatalf("pause: %+v, %v", got, err)
	}
	if _, err := a.Pause(ctx, sb.ID); !errors.Is(err, client.ErrConflict) {
		t.Errorf("pause twice: %v", err)
	}
	_, err = a.Run(ctx, sb.ID, client.Command{Args: []string{"true"}})
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 409 || !strings.Contains(e.Message, "paused") {
		t.Errorf("run while paused: %v, want 409 saying it is paused", err)
	}
	if _, err := a.Exec(ctx, sb.ID, client.Command{Args: []string{"true"}}); !errors.Is(err, client.ErrConflict) {
		t.Errorf("exec while paused: %v, want ErrConflict", err)
	}
	if _, err := b.Resume(ctx, sb.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("tenant b resumes a's sandbox: %v", err)
	}
	got, err = a.Resume(ctx, sb.ID)
	if err != nil || got.State != "running" {
		t.Fatalf("resume: %+v, %v", got, err)
	}
	if _, err := a.Resume(ctx, sb.ID); !errors.Is(err, client.ErrConflict) {
		t.Errorf("resume a running sandbox: %v", err)
	}
	if res, err := a.Run(ctx, sb.ID, client.Command{Args: []string{"true"}}); err != nil || res.Code != 0 {
		t.Errorf("run after resume: %+v, %v", res, err)
	}
}
