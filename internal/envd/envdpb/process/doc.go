// Package process holds the messages of envd's process service (E2B's
// in-sandbox commands), generated from process.proto by ../generate.sh.
package process
