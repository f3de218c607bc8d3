// Package hostcheck refuses HTTP requests whose Host names this machine
// by a name other than a loopback one. A listener without authentication
// on 127.0.0.1 trusts whoever can connect, and a browser lets any web page
// connect: with DNS rebinding, a page on attacker.example makes its own
// name resolve to 127.0.0.1, and the browser then treats the listener as
// that page's same-origin server. The one thing such a request cannot
// hide is its Host header, which carries the attacker's name; so a
// listener without authentication accepts only the names that cannot be
// rebound (localhost and loopback IP literals) and the names its operator
// lists.
//
// The journal's HTTP listener and the gateway's use it when they run
// without authentication.
package hostcheck

import (
	"fmt"
	"net"
	"net/http"
	"strings"
)

// Allowed reports whether host (a Host header or :authority: name or
// name:port, an IPv6 literal in brackets) is localhost, a loopback IP
// literal, or one of allowed. Names compare without case and without a
// trailing dot; an entry of allowed with a port matches only that port,
// one without matches every port. An empty or malformed host is refused.
func Allowed(host string, allowed []string) bool {
	name, port, ok := split(host)
	if !ok {
		return false
	}
	if name == "localhost" {
		return true
	}
	if ip := net.ParseIP(name); ip != nil && ip.IsLoopback() {
		return true
	}
	for _, a := range allowed {
		an, ap, ok := split(a)
		if !ok || an != name {
			continue
		}
		if ap == "" || ap == port {
			return true
		}
	}
	return false
}

// split returns a host's name (lower case, no trailing dot, IPv6 without
// brackets) and its port ("" without one).
func split(host string) (name, port string, ok bool) {
	host = strings.TrimSpace(host)
	if host == "" {
		return "", "", false
	}
	name = host
	if h, p, err := net.SplitHostPort(host); err == nil {
		if p == "" {
			return "", "", false // "name:"
		}
		name, port = h, p
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		name = host[1 : len(host)-1]
	} else if strings.Count(host, ":") == 1 || strings.ContainsAny(host, "[]") {
		return "", "", false // "name:" or a stray bracket
	}
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if name == "" || strings.ContainsAny(name, "/@ \t") {
		return "", "", false
	}
	return name, port, true
}

// Loopback returns middleware that answers 421 Misdirected Request, with
// a plain-text message saying which names are accepted and how to add
// one, to every request whose Host is not Allowed by allowed; the others
// go on to the handler.
func Loopback(allowed []string) func(http.Handler) http.Handler {
	allowed = append([]string(nil), allowed...)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if Allowed(r.Host, allowed) {
				next.ServeHTTP(w, r)
				return
			}
			Refuse(w, r.Host)
		})
	}
}

// Refuse writes the answer to a request for host that is not allowed.
func Refuse(w http.ResponseWriter, host string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusMisdirectedRequest)
	fmt.Fprint(w, Message(host))
}

// Message is the words of a refusal of host: what is accepted and how to
// accept more. The host is quoted, so a hostile one cannot forge lines.
func Message(host string) string {
	return fmt.Sprintf("host %q is not accepted: this listener runs without authentication, so it answers only requests addressed to localhost, 127.0.0.1 or [::1] "+
		"(a guard against DNS rebinding by web pages); give the name it is reached by with --allowed-hosts, or run it with authentication\n", host)
}
