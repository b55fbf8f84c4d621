// Package filesystem holds the messages of envd's filesystem service
// (E2B's in-sandbox files and watches), generated from filesystem.proto by
// ../generate.sh.
package filesystem
