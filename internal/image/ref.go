package image

import (
	"fmt"
	"strings"
)

// Normalize returns ref as the store keeps names, Docker's way:
// "python:3.12" is "docker.io/library/python:3.12", a name without a tag
// or digest gets ":latest", and a name of a registry keeps its host
// ("ghcr.io/o/i:t", "localhost:5000/x:latest"). A digest reference keeps
// only the digest ("REPO@sha256:…").
func Normalize(ref string) (string, error) {
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("%w: %q: %s", ErrBadRef, ref, why)
	}
	if ref == "" || len(ref) > 512 || strings.ContainsAny(ref, " \t\n\r\\") {
		return bad("empty, too long or holding spaces")
	}
	name, digest, hasDigest := strings.Cut(ref, "@")
	if hasDigest && !isDigest(digest) {
		return bad("a digest must be sha256: and 64 hex digits")
	}
	tag := ""
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name, tag = name[:i], name[i+1:]
		if tag == "" || len(tag) > 128 || !validTag(tag) {
			return bad("the tag may hold letters, digits, '_', '.' and '-' (128 at most)")
		}
	}
	parts := strings.Split(name, "/")
	host := ""
	if len(parts) > 1 && (strings.ContainsAny(parts[0], ".:") || parts[0] == "localhost") {
		host, parts = parts[0], parts[1:]
	}
	if host == "" || host == "index.docker.io" || host == "registry-1.docker.io" {
		host = "docker.io"
		if len(parts) == 1 {
			parts = append([]string{"library"}, parts...)
		}
	}
	for _, p := range parts {
		if !validComponent(p) {
			return bad("a repository name is lower-case letters, digits and separators")
		}
	}
	out := host + "/" + strings.Join(parts, "/")
	switch {
	case hasDigest:
		return out + "@" + digest, nil
	case tag == "":
		return out + ":latest", nil
	}
	return out + ":" + tag, nil
}

func validTag(t string) bool {
	for i, c := range t {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_':
		case (c == '.' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

func validComponent(p string) bool {
	if p == "" || len(p) > 255 {
		return false
	}
	for i, c := range p {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '.' || c == '_' || c == '-') && i > 0 && i < len(p)-1:
		default:
			return false
		}
	}
	return true
}
