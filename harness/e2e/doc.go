// Package e2e is opjournal's end-to-end test suite. It builds the opjournal
// binary once, starts it as a real process on SQLite and on PostgreSQL, and
// drives it over gRPC and REST the way a client would: registering,
// claiming and marking operations, killing and restarting servers, running
// two servers on one database and sending bad input.
//
// The package has no code outside its tests. Run it with
//
//	bash scripts/test.sh ./harness/e2e/         (from the repository root; or cd harness && go test ./e2e/)
//
// PostgreSQL is required (see internal/testkit/pgtest; `make test` finds or starts a
// server); it is never skipped.
package e2e
