package postgres

import (
	"context"
	"errors"
	"io"
	"net"
	"regexp"
	"strings"
	"syscall"

	"github.com/golang-migrate/migrate/v4/database"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/opjournal/opjournal"
)

// classify turns a database error into an *opjournal.Error: CodeUnavailable
// when the database cannot be reached or did not answer in time (the
// caller may retry the call; every journal call is idempotent by key or
// fenced by attempt), CodeInternal otherwise. The cause is kept for logs,
// with any password removed.
func classify(what string, err error) error {
	code := opjournal.CodeInternal
	msg := "database error during " + what
	if unavailable(err) {
		code = opjournal.CodeUnavailable
		msg = "database unavailable during " + what
	}
	return &opjournal.Error{Code: code, Message: msg, Err: redact(err)}
}

// goneErrors are the causes (wrapped at any depth) by which a database
// that went away shows: refused, reset, cut or closed connections.
var goneErrors = []error{
	io.EOF, io.ErrUnexpectedEOF, net.ErrClosed, pgconn.ErrConnClosed,
	syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE,
	syscall.ETIMEDOUT, syscall.EHOSTUNREACH, syscall.ENETUNREACH,
	context.DeadlineExceeded, context.Canceled,
}

// unavailable reports whether err means that the database is out of
// reach for now (rather than that it refused this statement).
func unavailable(err error) bool {
	// golang-migrate's errors do not unwrap: look inside them.
	var mErr database.Error
	var mErrP *database.Error
	switch {
	case errors.As(err, &mErrP) && mErrP != nil && mErrP.OrigErr != nil:
		return unavailable(mErrP.OrigErr)
	case errors.As(err, &mErr) && mErr.OrigErr != nil:
		return unavailable(mErr.OrigErr)
	}
	// When the server answered, its SQLSTATE decides (also inside a
	// "failed to connect" error: a wrong password or a missing database is
	// a configuration error, not an outage).
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return notNow(pgErr.Code)
	}
	for _, target := range goneErrors {
		if errors.Is(err, target) {
			return true
		}
	}
	var netErr net.Error
	var connErr *pgconn.ConnectError
	if errors.As(err, &netErr) || errors.As(err, &connErr) || pgconn.Timeout(err) {
		return true
	}
	// Last resort for causes that lost their type on the way (through
	// database/sql or a driver that formats rather than wraps).
	s := err.Error()
	for _, sign := range []string{"conn closed", "closed pool", "unexpected EOF", "failed to connect", "connection refused", "connection reset", "broken pipe", "i/o timeout", "timeout: "} {
		if strings.Contains(s, sign) {
			return true
		}
	}
	return false
}

// notNow reports whether a SQLSTATE means "not now" (the database cannot
// serve at the moment) rather than "not this".
func notNow(sqlstate string) bool {
	switch {
	case strings.HasPrefix(sqlstate, "08"): // connection exception
		return true
	case strings.HasPrefix(sqlstate, "53"): // insufficient resources: too many connections, disk full, out of memory
		return true
	}
	switch sqlstate {
	case "57P01", "57P02", "57P03": // admin or crash shutdown; cannot connect now (starting up, recovering)
		return true
	case "57014", "55P03": // canceled (statement_timeout, a cancel request), lock_timeout: rolled back
		return true
	case "25006": // read-only transaction: a standby, e.g. after a failover until the pool reaches the new primary
		return true
	case "40001", "40P01": // serialization failure, deadlock: the transaction was rolled back, so trying again is safe
		return true
	}
	return false
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
