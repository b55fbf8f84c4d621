module github.com/hutch-sandbox/hutch

go 1.26.8

require (
	golang.org/x/sys v0.50.0
	gopkg.in/yaml.v3 v3.0.1
)
