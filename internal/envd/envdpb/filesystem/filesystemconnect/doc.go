// Package filesystemconnect holds the Connect handler and client of envd's
// filesystem service, generated from ../filesystem.proto by
// ../../generate.sh.
package filesystemconnect
