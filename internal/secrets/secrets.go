// Package secrets keeps real credentials out of sandboxes (S3). A sandbox
// gets a random placeholder for each secret; hutch's egress proxy swaps the
// real value in only on requests to the hosts the secret is bound to, after
// terminating the sandbox's TLS to those hosts with a certificate authority
// made for that sandbox alone, and swaps it back out of responses.
//
// This package holds the pieces that know nothing of the network: the
// redacting Value, the Secret and its placeholder, the per-sandbox CA with
// its leaf certificates, and a streaming Replacer. Package egress does the
// interception.
package secrets

// Value is a secret's real value. It never prints itself: String,
// GoString, Format, LogValue and MarshalJSON/MarshalText give "[redacted]".
// Only Bytes hands the value out, for substitution.
//
// A Value is immutable and safe for concurrent use; copies share the bytes.
// The zero Value is empty. Values are not comparable with ==; compare
// Bytes, in constant time where it matters.
type Value struct {
	// b points to a pointer to the bytes. fmt prints some values by
	// reflection, without calling their methods: those it reaches through
	// an unexported field (a Value in a caller's unexported struct field)
	// and the argument of a verb it rejects (%p of a Value). There it
	// prints a pointer to a pointer as an address, at any depth and for
	// any verb, where a []byte, or a pointer to one, would print the
	// bytes.
	b **[]byte
	// The blank field keeps == off Values: it would compare pointers, not
	// bytes.
	_ [0]func()
}

// Secret is one credential of a sandbox.
type Secret struct {
	// Name is the environment variable that holds the placeholder inside
	// the sandbox (and, by default, the real value in hutch's own
	// environment).
	Name string
	// Hosts are the destinations the real value may go to, in the syntax
	// of network.allowed_domains: "api.example.com", "*.example.com",
	// optionally ":PORT" (without a port: 443, and 80 with AllowPlainHTTP).
	Hosts []string
	// Value is the real value.
	Value Value
	// Placeholder is what the sandbox holds instead: random, unique to the
	// sandbox, starting with the configured prefix.
	Placeholder string
	// InQuery and InBody allow substitution in the URL's query and in the
	// request body; headers are always substituted.
	InQuery, InBody bool
	// AllowPlainHTTP allows the real value on plain http:// requests.
	AllowPlainHTTP bool
}
