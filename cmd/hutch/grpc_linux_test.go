package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	fspb "github.com/hutch-sandbox/hutch/internal/envd/envdpb/filesystem"
	"github.com/hutch-sandbox/hutch/internal/envd/envdpb/filesystem/filesystemconnect"
	pb "github.com/hutch-sandbox/hutch/internal/envd/envdpb/process"
	"github.com/hutch-sandbox/hutch/internal/envd/envdpb/process/processconnect"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestE2BGRPC reaches envd through hutch serve's listener with gRPC over
// HTTP/2 without TLS (h2c, prior knowledge), as a client generated from
// envd's protos does: a unary call, a server stream, and a client stream
// (StreamInput) feeding a command's input; an HTTP/1.1 client of the
// same listener is still answered in HTTP/1.1.
func TestE2BGRPC(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	d := startDaemonWith(t, nil)
	key := lastLine(d.admin(t, "token", "create", "--tenant", "grpc", "--e2b", "--state-dir", d.stateDir).stdout)

	req, _ := http.NewRequest("POST", d.tcp+"/sandboxes", strings.NewReader(`{"templateID":"base","timeout":300}`))
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sb struct{ SandboxID, EnvdAccessToken string }
	err = json.NewDecoder(resp.Body).Decode(&sb)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated || resp.Proto != "HTTP/1.1" {
		t.Fatalf("create over HTTP/1.1: %s %s %v", resp.Proto, resp.Status, err)
	}

	h2c := &http.Client{Transport: &http.Transport{
		Protocols: func() *http.Protocols { p := new(http.Protocols); p.SetUnencryptedHTTP2(true); return p }(),
		// Never TLS: the listener is plain.
		DialTLSContext: func(context.Context, string, string) (net.Conn, error) { return nil, tls.RecordHeaderError{} },
	}}
	opts := []connect.ClientOption{connect.WithGRPC(), connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, r connect.AnyRequest) (connect.AnyResponse, error) {
			r.Header().Set("E2b-Sandbox-Id", sb.SandboxID)
			r.Header().Set("X-Access-Token", sb.EnvdAccessToken)
			return next(ctx, r)
		}
	}))}
	fs := filesystemconnect.NewFilesystemClient(h2c, d.tcp, opts...)
	proc := processconnect.NewProcessClient(h2c, d.tcp, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	headers := func(h http.Header) {
		h.Set("E2b-Sandbox-Id", sb.SandboxID)
		h.Set("X-Access-Token", sb.EnvdAccessToken)
	}

	st, err := fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "/"}))
	if err != nil || st.Msg.GetEntry().GetType() != fspb.FileType_FILE_TYPE_DIRECTORY {
		t.Fatalf("Stat / over gRPC: %v, %v", st, err)
	}
	bad := connect.NewRequest(&fspb.StatRequest{Path: "/"})
	if _, err := filesystemconnect.NewFilesystemClient(h2c, d.tcp, connect.WithGRPC()).Stat(ctx, bad); err == nil {
		t.Errorf("Stat without the sandbox's headers: %v, want an error", err)
	}

	tag, stdin := "grpc-cat", true
	startReq := connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "cat"}, Tag: &tag, Stdin: &stdin})
	headers(startReq.Header())
	start, err := proc.Start(ctx, startReq)
	if err != nil {
		t.Fatal(err)
	}
	defer start.Close()
	if !start.Receive() || start.Msg().GetEvent().GetStart().GetPid() == 0 {
		t.Fatalf("Start over gRPC: first event %v, %v", start.Msg(), start.Err())
	}
	in := proc.StreamInput(ctx)
	headers(in.RequestHeader())
	for _, m := range []*pb.StreamInputRequest{
		{Event: &pb.StreamInputRequest_Start{Start: &pb.StreamInputRequest_StartEvent{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: tag}}}}},
		{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("through h2c\n")}}}}},
	} {
		if err := in.Send(m); err != nil {
			t.Fatalf("StreamInput send: %v", err)
		}
	}
	if _, err := in.CloseAndReceive(); err != nil {
		t.Fatalf("StreamInput: %v", err)
	}
	closeReq := connect.NewRequest(&pb.CloseStdinRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: tag}}})
	headers(closeReq.Header())
	if _, err := proc.CloseStdin(ctx, closeReq); err != nil {
		t.Fatalf("CloseStdin: %v", err)
	}
	var out strings.Builder
	var exited bool
	for start.Receive() {
		ev := start.Msg().GetEvent()
		out.Write(ev.GetData().GetStdout())
		if ev.GetEnd() != nil {
			exited = true
		}
	}
	if !exited || out.String() != "through h2c\n" {
		t.Errorf("cat over gRPC: output %q, ended %v, err %v", out.String(), exited, start.Err())
	}
}
