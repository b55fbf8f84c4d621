module github.com/hutch-sandbox/hutch

go 1.26.8

require (
	golang.org/x/sys v0.50.0
	gopkg.in/yaml.v3 v3.0.1
)

require (
	golang.org/x/net v0.62.0
	golang.org/x/text v0.43.0 // indirect
)
