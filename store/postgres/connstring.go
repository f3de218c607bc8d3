package postgres

import (
	"cmp"
	"errors"
	"fmt"
	neturl "net/url"
	"os"
	"strings"
)

// A PostgreSQL connection string comes in two forms (libpq's, which pgx
// and golang-migrate follow): a URL, postgres://user@a:5432,b:5432/db?…,
// and keyword/value pairs, host=a,b port=5432 dbname=db …, the form that
// Patroni, pg_auto_failover (pg_autoctl show uri --formation) and most
// operators' tools print. The store takes both; the keyword/value form is
// turned into the equivalent URL first, so that our own parameters
// (opjournal_statement_timeout, …) and the defaults apply to it the same
// way and golang-migrate, which only takes URLs, gets one too.

// IsKeywordValue reports whether s is a keyword/value connection string
// (host=… dbname=…) rather than a URL: it has no "://" and starts with a
// keyword followed by "=".
func IsKeywordValue(s string) bool {
	if strings.Contains(s, "://") {
		return false
	}
	s = strings.TrimLeft(s, " \t\n\r\v\f")
	i := strings.IndexByte(s, '=')
	if i <= 0 {
		return false
	}
	key := strings.TrimRight(s[:i], " \t\n\r\v\f")
	for _, r := range key {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return key != ""
}

// parseKeywordValue reads a keyword/value connection string as libpq does:
// pairs separated by white space, "=" with optional white space around it,
// values bare (a backslash escapes the next character) or in single quotes
// (\' and \\ inside). Its errors name a keyword, never a value: the
// string may hold a password.
func parseKeywordValue(s string) ([][2]string, error) {
	const space = " \t\n\r\v\f"
	var out [][2]string
	if strings.IndexByte(s, 0) >= 0 {
		return nil, errors.New("a NUL byte in the connection string")
	}
	s = strings.TrimLeft(s, space)
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return nil, errors.New(`a word without "=" in the connection string (want keyword=value pairs, e.g. host=db1,db2 dbname=opjournal)`)
		}
		key := strings.TrimRight(s[:eq], space)
		if key == "" {
			return nil, errors.New(`an "=" without a keyword before it in the connection string`)
		}
		if strings.ContainsAny(key, space) {
			return nil, fmt.Errorf(`missing "=" after %q in the connection string`, strings.Fields(key)[0])
		}
		s = strings.TrimLeft(s[eq+1:], space)
		var val strings.Builder
		if strings.HasPrefix(s, "'") {
			s = s[1:]
			closed := false
			for len(s) > 0 {
				c := s[0]
				s = s[1:]
				if c == '\'' {
					closed = true
					break
				}
				if c == '\\' && len(s) > 0 {
					c, s = s[0], s[1:]
				}
				val.WriteByte(c)
			}
			if !closed {
				return nil, fmt.Errorf("the value of %q has no closing quote", key)
			}
		} else {
			for len(s) > 0 && !strings.ContainsRune(space, rune(s[0])) {
				c := s[0]
				s = s[1:]
				if c == '\\' {
					if len(s) == 0 {
						break
					}
					c, s = s[0], s[1:]
				}
				val.WriteByte(c)
			}
		}
		out = append(out, [2]string{key, val.String()})
		s = strings.TrimLeft(s, space)
	}
	return out, nil
}

// keywordValueURL turns a keyword/value connection string into the
// postgres:// URL that pgx reads the same way: user and password in the
// URL's user part, dbname as its path (where golang-migrate looks for
// it), everything else, host and port included, as query parameters
// (pgx lets those override the URL's host part, and a host may be a unix
// socket directory, which a URL's host part cannot hold).
func keywordValueURL(s string) (string, error) {
	pairs, err := parseKeywordValue(s)
	if err != nil {
		return "", fmt.Errorf("postgres: database connection string: %w", err)
	}
	u := neturl.URL{Scheme: "postgres"}
	q := neturl.Values{}
	var user, password string
	var hasUser, hasPassword bool
	for _, p := range pairs {
		switch p[0] {
		case "user":
			user, hasUser = p[1], true
		case "password":
			password, hasPassword = p[1], true
		case "dbname":
			u.Path = "/" + p[1]
		default:
			q.Set(p[0], p[1]) // a keyword given twice: the last wins, as in libpq
		}
	}
	switch {
	case hasPassword:
		u.User = neturl.UserPassword(user, password)
	case hasUser:
		u.User = neturl.User(user)
	}
	u.RawQuery = q.Encode()
	if u.Path == "" {
		u.Path = "/"
	}
	return u.String(), nil
}

// multiHost reports whether a parsed URL names more than one host (in its
// host part, its host parameter or, with neither, $PGHOST).
func multiHost(u *neturl.URL, q neturl.Values) bool {
	switch {
	case q.Get("host") != "":
		return strings.Contains(q.Get("host"), ",")
	case u.Host != "":
		return strings.Contains(u.Host, ",")
	}
	return strings.Contains(os.Getenv("PGHOST"), ",")
}

// Hosts returns the hosts (host:port, or a socket directory) a connection
// string names, in the order pgx tries them, for log lines: never the
// user, password or anything else of it. It returns nil when the string
// cannot be read.
func Hosts(conn string) []string {
	if IsKeywordValue(conn) {
		var err error
		if conn, err = keywordValueURL(conn); err != nil {
			return nil
		}
	}
	scheme, rest, ok := strings.Cut(conn, "://")
	if !ok || (scheme != "postgres" && scheme != "postgresql") {
		return nil
	}
	// By hand: net/url refuses a host part with several ports (a:1,b:2).
	authority, query, _ := strings.Cut(rest, "?")
	authority, _, _ = strings.Cut(authority, "/")
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		authority = authority[i+1:]
	}
	q, err := neturl.ParseQuery(query)
	if err != nil {
		return nil
	}
	var hosts, ports []string
	if h := q.Get("host"); h != "" {
		hosts = strings.Split(h, ",")
	} else if authority != "" {
		for _, hp := range strings.Split(authority, ",") {
			h, p := hp, ""
			if i := strings.LastIndexByte(hp, ':'); i >= 0 && !strings.HasSuffix(hp, "]") {
				h, p = hp[:i], hp[i+1:]
			}
			if uh, err := neturl.PathUnescape(h); err == nil {
				h = uh
			}
			hosts, ports = append(hosts, h), append(ports, p)
		}
	} else if h := os.Getenv("PGHOST"); h != "" {
		hosts = strings.Split(h, ",")
	} else {
		hosts = []string{"localhost"}
	}
	if p := q.Get("port"); p != "" {
		ports = strings.Split(p, ",")
	}
	out := make([]string, len(hosts))
	for i, h := range hosts {
		p := ""
		switch {
		case i < len(ports):
			p = ports[i]
		case len(ports) == 1:
			p = ports[0]
		}
		if p == "" {
			p = cmp.Or(os.Getenv("PGPORT"), "5432")
		}
		if strings.HasPrefix(h, "/") {
			out[i] = h + " (socket, port " + p + ")"
		} else {
			out[i] = h + ":" + p
		}
	}
	return out
}
