#!/usr/bin/env bash
# generate.sh makes the Go code of envd's protocol from the .proto files
# here: the messages (protoc-gen-go) and the Connect handlers
# (protoc-gen-connect-go), at the versions go.mod names. Run it after
# changing a .proto file (`go generate ./internal/envd/envdpb`); the
# generated files are committed, so building hutch needs none of this.
# Needs protoc (Debian's protobuf-compiler, which brings the well-known
# types) and go.
set -euo pipefail
cd "$(dirname "$0")"
command -v protoc >/dev/null || { echo "generate.sh: needs protoc (apt-get install protobuf-compiler)" >&2; exit 1; }
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
ver() { go list -m -f '{{.Version}}' "$1"; }
GOBIN=$bin go install "google.golang.org/protobuf/cmd/protoc-gen-go@$(ver google.golang.org/protobuf)"
GOBIN=$bin go install "connectrpc.com/connect/cmd/protoc-gen-connect-go@$(ver connectrpc.com/connect)"
for p in process filesystem; do
	PATH=$bin:$PATH protoc -I . -I /usr/include \
		--go_out=. --go_opt=paths=source_relative \
		--connect-go_out=. --connect-go_opt=paths=source_relative \
		"$p/$p.proto"
done
