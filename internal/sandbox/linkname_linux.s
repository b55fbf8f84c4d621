// This file lets child_linux.go declare the runtime fork hooks it links to.
