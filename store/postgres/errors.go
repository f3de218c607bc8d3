package postgres

import (
	"context"
	"errors"
	"net"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/opjournal/opjournal"
)

// classify turns a database error into an *opjournal.Error: CodeUnavailable
// when the database cannot be reached (the caller may retry the call; every
// journal call is idempotent by key or fenced by attempt), CodeInternal
// otherwise. The cause is kept for logs, with any password removed.
func classify(what string, err error) error {
	code := opjournal.CodeInternal
	msg := "database error during " + what
	if unavailable(err) {
		code = opjournal.CodeUnavailable
		msg = "database unavailable during " + what
	}
	return &opjournal.Error{Code: code, Message: msg, Err: redact(err)}
}

func unavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.HasPrefix(pgErr.Code, "08"), // connection exception
			pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03", // shutdown, cannot connect now
			pgErr.Code == "53300": // too many connections
			return true
		}
		return false
	}
	var netErr net.Error
	var connErr *pgconn.ConnectError
	return errors.As(err, &netErr) || errors.As(err, &connErr) || pgconn.Timeout(err) ||
		strings.Contains(err.Error(), "conn closed") || strings.Contains(err.Error(), "unexpected EOF")
}

var passwordInURL = regexp.MustCompile(`(://[^:/@\s]*:)[^@\s]*@`)

// redact removes passwords that drivers echo back inside URLs or DSNs, so
// no secret reaches a log line through an error.
func redact(err error) error {
	if err == nil {
		return nil
	}
	s := err.Error()
	clean := passwordInURL.ReplaceAllString(s, "${1}xxxxx@")
	clean = regexp.MustCompile(`password=\S+`).ReplaceAllString(clean, "password=xxxxx")
	if clean == s {
		return err
	}
	return errors.New(clean)
}
