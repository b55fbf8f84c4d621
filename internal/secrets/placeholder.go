package secrets

import (
	"crypto/rand"
	"fmt"
)

const (
	// placeholderChars are the characters of a placeholder's random part.
	placeholderChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	// minPlaceholderRandom is the least number of random characters in a
	// placeholder: 24 of 62 characters are about 142 bits.
	minPlaceholderRandom = 24
	// maxPlaceholderPrefix is the longest prefix NewPlaceholder takes.
	maxPlaceholderPrefix = 64
)

// NewPlaceholder returns a random placeholder for a secret whose real value
// is realLen bytes long: prefix followed by random characters from
// [A-Za-z0-9] (from crypto/rand, each equally likely). The placeholder is
// as long as the real value when that leaves at least 24 random characters
// after the prefix, so that substituting one for the other keeps lengths
// (a Content-Length stays right); else it is prefix plus 24 random
// characters.
//
// The prefix may be empty. It is an error if it holds a byte outside
// printable ASCII without space (0x21-0x7e), if it is longer than 64
// bytes, or if realLen is negative.
func NewPlaceholder(prefix string, realLen int) (string, error) {
	if len(prefix) > maxPlaceholderPrefix {
		return "", fmt.Errorf("placeholder prefix %q is longer than %d bytes", prefix, maxPlaceholderPrefix)
	}
	for i := 0; i < len(prefix); i++ {
		if c := prefix[i]; c < 0x21 || c > 0x7e {
			return "", fmt.Errorf("placeholder prefix %q: byte %#02x at %d is not printable ASCII without space", prefix, c, i)
		}
	}
	if realLen < 0 {
		return "", fmt.Errorf("placeholder: negative length %d of the real value", realLen)
	}
	n := realLen - len(prefix)
	if n < minPlaceholderRandom {
		n = minPlaceholderRandom
	}
	out := make([]byte, len(prefix), len(prefix)+n)
	copy(out, prefix)
	// Rejection sampling keeps the characters uniform: 248 = 4*62, so
	// bytes from 248 up are dropped.
	const limit = 256 - 256%len(placeholderChars)
	buf := make([]byte, n+n/4+8)
	for len(out) < cap(out) {
		if _, err := rand.Read(buf); err != nil {
			return "", fmt.Errorf("placeholder: %w", err)
		}
		for _, c := range buf {
			if int(c) >= limit {
				continue
			}
			out = append(out, placeholderChars[int(c)%len(placeholderChars)])
			if len(out) == cap(out) {
				break
			}
		}
	}
	return string(out), nil
}
