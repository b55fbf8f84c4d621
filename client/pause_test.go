package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

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

// TestPauseFilesOnly: PauseWith FilesOnly asks for a pause without memory
// (body {"memory": false}), which the paused event says.
func TestPauseFilesOnly(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tok, err := testManager.Store().CreateToken(ctx, "pause-files")
	if err != nil {
		t.Fatal(err)
	}
	c, _ := client.New(testTCP, tok)
	sb := newSandbox(t, c)
	got, err := c.PauseWith(ctx, sb.ID, client.PauseOptions{FilesOnly: true})
	if err != nil || got.State != "paused" {
		t.Fatalf("pause without memory: %+v, %v", got, err)
	}
	if _, err := c.Resume(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	for ev, err := range c.Events(ctx, sb.ID, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == client.EventPaused {
			if mem, ok := ev.Data["memory"]; !ok || mem != false {
				t.Errorf("paused event %+v, want memory false", ev.Data)
			}
			return
		}
	}
	t.Error("no paused event")
}
