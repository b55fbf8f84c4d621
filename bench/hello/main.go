// Command hello is a Go hello world: the floor of any command written in
// Go, from the start of its process to its exit. bench/cli.sh measures
// hutch's CLI against it.
package main

import "fmt"

func main() { fmt.Println("hello, world") }
