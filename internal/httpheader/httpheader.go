// Package httpheader says what kind of HTTP header a name is, for the
// policy that names headers (which a route forwards, stores or sets) and
// the gateway that forwards and stores them: one answer for both.
package httpheader

import (
	"net/textproto"
	"slices"
	"strings"
)

// hopByHop are the headers a proxy never forwards or stores (RFC 9110,
// 7.6.1).
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer",
	"Transfer-Encoding", "Upgrade", "Proxy-Connection"}

// HopByHop reports whether a header is hop-by-hop (never forwarded or
// stored by a proxy).
func HopByHop(name string) bool {
	return slices.Contains(hopByHop, textproto.CanonicalMIMEHeaderKey(name))
}

// secretNames are header names whose values are secrets.
var secretNames = []string{"authorization", "proxy-authorization", "cookie"}

// secretWords make any header whose name contains one of them hold a
// secret.
var secretWords = []string{"token", "secret", "key", "auth"}

// IsSecret reports whether header name carries a secret: its value must
// come from the environment, and it is never logged or stored.
func IsSecret(name string) bool {
	l := strings.ToLower(name)
	if slices.Contains(secretNames, l) {
		return true
	}
	for _, w := range secretWords {
		if strings.Contains(l, w) {
			return true
		}
	}
	return false
}
