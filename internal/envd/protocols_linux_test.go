package envd

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	fspb "github.com/hutch-sandbox/hutch/internal/envd/envdpb/filesystem"
	"github.com/hutch-sandbox/hutch/internal/envd/envdpb/filesystem/filesystemconnect"
	pb "github.com/hutch-sandbox/hutch/internal/envd/envdpb/process"
	"github.com/hutch-sandbox/hutch/internal/envd/envdpb/process/processconnect"
)

// protocolClient is envd's services as connect-go's generated clients
// reach them with one protocol and codec.
type protocolClient struct {
	process processconnect.ProcessClient
	fs      filesystemconnect.FilesystemClient
}

// sandboxHeader names the sandbox of every call, sb1 unless the context
// names another (withSandbox).
func sandboxHeader() connect.Interceptor {
	set := func(ctx context.Context, h http.Header) {
		id, _ := ctx.Value(sandboxKey{}).(string)
		if id == "" {
			id = "sb1"
		}
		h.Set("E2b-Sandbox-Id", id)
	}
	return headerInterceptor{set}
}

type sandboxKey struct{}

func withSandbox(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, sandboxKey{}, id)
}

// headerInterceptor sets request headers of unary and streaming calls.
type headerInterceptor struct {
	set func(context.Context, http.Header)
}

func (i headerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		i.set(ctx, req.Header())
		return next(ctx, req)
	}
}

func (i headerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		i.set(ctx, conn.RequestHeader())
		return conn
	}
}

func (i headerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// protocolClients returns a client of e for each protocol envd serves:
// Connect with binary protobuf (connect-go's default), Connect with JSON
// and gzip, gRPC (over HTTP/2 with TLS, on a second server of the same
// handler) and gRPC-Web.
func protocolClients(t *testing.T, e *env) map[string]protocolClient {
	t.Helper()
	h2 := httptest.NewUnstartedServer(wrapped(e.h))
	h2.EnableHTTP2 = true
	h2.StartTLS()
	t.Cleanup(h2.Close)
	out := map[string]protocolClient{}
	for name, c := range map[string]struct {
		url    string
		client *http.Client
		opts   []connect.ClientOption
	}{
		"connect+proto":     {e.srv.URL, e.srv.Client(), nil},
		"connect+json+gzip": {e.srv.URL, e.srv.Client(), []connect.ClientOption{connect.WithProtoJSON(), connect.WithSendGzip()}},
		"grpc":              {h2.URL, h2.Client(), []connect.ClientOption{connect.WithGRPC()}},
		"grpc-web":          {e.srv.URL, e.srv.Client(), []connect.ClientOption{connect.WithGRPCWeb()}},
	} {
		opts := append(c.opts, connect.WithInterceptors(sandboxHeader()))
		out[name] = protocolClient{
			process: processconnect.NewProcessClient(c.client, c.url, opts...),
			fs:      filesystemconnect.NewFilesystemClient(c.client, c.url, opts...),
		}
	}
	return out
}

// TestProtocols speaks to envd with connect-go's generated clients in
// every protocol it serves: a command started, its input sent through
// StreamInput (a client stream: the start naming it, data, a keepalive,
// more data), its stdin closed, its output and end read; errors of the
// handler and of the sandbox's resolution in the client's protocol.
func TestProtocols(t *testing.T) {
	e := newEnv(t)
	for name, c := range protocolClients(t, e) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			st, err := c.fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "~"}))
			if err != nil || st.Msg.Entry.GetType() != fspb.FileType_FILE_TYPE_DIRECTORY || st.Msg.Entry.GetPath() != e.home {
				t.Fatalf("stat of the home: %v, %v", st, err)
			}
			if _, err := c.fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "missing"})); connect.CodeOf(err) != connect.CodeNotFound {
				t.Errorf("stat of a missing path: %v", err)
			}
			if _, err := c.process.List(withSandbox(ctx, "other"), connect.NewRequest(&pb.ListRequest{})); connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), "other") {
				t.Errorf("list in an unknown sandbox: %v", err)
			}

			tag := "in-" + name
			stdin := true
			start, err := c.process.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "cat"}, Tag: &tag, Stdin: &stdin}))
			if err != nil {
				t.Fatal(err)
			}
			defer start.Close()
			if !start.Receive() || start.Msg().GetEvent().GetStart().GetPid() == 0 {
				t.Fatalf("first event %v: %v", start.Msg(), start.Err())
			}
			pid := start.Msg().Event.GetStart().Pid

			in := c.process.StreamInput(ctx)
			for _, m := range []*pb.StreamInputRequest{
				{Event: &pb.StreamInputRequest_Start{Start: &pb.StreamInputRequest_StartEvent{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: tag}}}}},
				{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("hello ")}}}}},
				{Event: &pb.StreamInputRequest_Keepalive{Keepalive: &pb.StreamInputRequest_KeepAlive{}}},
				{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("world\n")}}}}},
			} {
				if err := in.Send(m); err != nil {
					t.Fatalf("stream input: %v", err)
				}
			}
			if _, err := in.CloseAndReceive(); err != nil {
				t.Fatalf("stream input: %v", err)
			}
			if _, err := c.process.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}})); err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			var end *pb.ProcessEvent_EndEvent
			for end == nil && start.Receive() {
				ev := start.Msg().GetEvent()
				out.Write(ev.GetData().GetStdout())
				end = ev.GetEnd()
			}
			if end == nil || !end.Exited || end.ExitCode != 0 || out.String() != "hello world\n" {
				t.Fatalf("output %q, end %v, err %v", out.String(), end, start.Err())
			}
			if start.Receive() || start.Err() != nil {
				t.Errorf("after the end: %v, %v", start.Msg(), start.Err())
			}

			// Input without the start naming the process, and for a
			// process that is gone: errors, in the client's protocol.
			in = c.process.StreamInput(ctx)
			_ = in.Send(&pb.StreamInputRequest{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("x")}}}}})
			if _, err := in.CloseAndReceive(); connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("input before the start: %v", err)
			}
			in = c.process.StreamInput(ctx)
			_ = in.Send(&pb.StreamInputRequest{Event: &pb.StreamInputRequest_Start{Start: &pb.StreamInputRequest_StartEvent{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}}}})
			if _, err := in.CloseAndReceive(); connect.CodeOf(err) != connect.CodeNotFound {
				t.Errorf("input to an ended process: %v", err)
			}

			// A command that cannot start: the stream's error.
			bad, err := c.process.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/nonexistent"}}))
			if err != nil {
				t.Fatal(err)
			}
			for bad.Receive() {
				t.Errorf("event %v from a command that cannot start", bad.Msg())
			}
			if connect.CodeOf(bad.Err()) != connect.CodeNotFound {
				t.Errorf("start of a missing command: %v", bad.Err())
			}
			bad.Close()
		})
	}
}

// TestProtocolsSandboxEnds: a sandbox that ends under a command's stream
// cuts the response off, without an end, in every protocol: a gRPC or
// Connect client sees a broken stream, not a status the handler wrote.
func TestProtocolsSandboxEnds(t *testing.T) {
	e := newEnv(t)
	clients := protocolClients(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	streams := map[string]*connect.ServerStreamForClient[pb.StartResponse]{}
	for name, c := range clients {
		s, err := c.process.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sleep", Args: []string{"60"}}}))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if !s.Receive() || s.Msg().GetEvent().GetStart() == nil {
			t.Fatalf("%s: first event %v: %v", name, s.Msg(), s.Err())
		}
		streams[name] = s
	}
	e.agent.Close()
	for name, s := range streams {
		for s.Receive() {
			if s.Msg().GetEvent().GetEnd() != nil {
				t.Errorf("%s: an end after the sandbox ended", name)
			}
		}
		// Cut off: an incomplete envelope (HTTP/1.1), a reset stream
		// (HTTP/2); never the agent's error as a status.
		err := s.Err()
		if err == nil || strings.Contains(err.Error(), "agent") ||
			(!strings.Contains(err.Error(), "incomplete envelope") && !strings.Contains(err.Error(), "INTERNAL_ERROR")) {
			t.Errorf("%s: the stream ended with %v, want it cut off", name, err)
		}
	}
}

// wrapped serves h through a ResponseWriter that is no http.Flusher
// itself, only through Unwrap, as the daemon's metrics wrap envd's.
func wrapped(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(plainWriter{w}, r)
	})
}

type plainWriter struct{ w http.ResponseWriter }

func (p plainWriter) Header() http.Header         { return p.w.Header() }
func (p plainWriter) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p plainWriter) WriteHeader(code int)        { p.w.WriteHeader(code) }
func (p plainWriter) Unwrap() http.ResponseWriter { return p.w }
