// Package processconnect holds the Connect handler and client of envd's
// process service, generated from ../process.proto by ../../generate.sh.
package processconnect
