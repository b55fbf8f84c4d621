// Package envdpb holds envd's protocol: the .proto files that describe
// E2B's in-sandbox API as its SDKs call it (package process: commands;
// package filesystem: files and watches), and the Go code generated from
// them into the subpackages process, filesystem and their *connect
// packages (generate.sh; `go generate`). internal/envd serves it with
// connectrpc.com/connect, which speaks every codec and protocol a client
// may choose: Connect with JSON or binary protobuf, gRPC and gRPC-Web.
package envdpb

//go:generate ./generate.sh
