// Package pgenv names the PostgreSQL server that tests and harnesses use:
// $TEST_DATABASE_URL, else the local test database. It is apart from
// internal/testkit/pgtest, which imports the testing package, so a harness binary
// (opjournal-soak) can default to the same server without linking testing.
package pgenv

import "os"

// DefaultTestURL is used when TEST_DATABASE_URL is not set.
const DefaultTestURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// TestURL returns the test server's URL: $TEST_DATABASE_URL, else
// DefaultTestURL.
func TestURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultTestURL
}
