package console

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"github.com/opjournal/opjournal/server/auth"
)

// Session defaults (Config.SessionIdle, SessionLifetime, MaxSessions).
const (
	DefaultSessionIdle     = time.Hour
	DefaultSessionLifetime = 12 * time.Hour
	DefaultMaxSessions     = 10000
)

// sessions holds the signed-in sessions in memory: the cookie carries
// only a random id, so it is worth nothing as a bearer token, tells
// nothing of the token, and ends when the server forgets it (sign-out,
// expiry, restart). A session keeps the token's digest, not the token, to
// find out on every request whether the tokens file still lists it.
type sessions struct {
	mu       sync.Mutex
	by       map[string]*heldSession
	idle     time.Duration
	lifetime time.Duration
	max      int
	now      func() time.Time
}

// heldSession is one session of the store.
type heldSession struct {
	digest  auth.TokenDigest
	name    string // the principal signed in as
	created time.Time
	seen    time.Time
}

// sessionIDBytes is the size of a session id: 256 bits from crypto/rand,
// beyond guessing.
const sessionIDBytes = 32

// create starts a session for the token with digest d signed in as name
// and returns its id. At the bound, expired sessions go first, then the
// least recently used one: a flood of sign-ins (each needs a valid token)
// cannot grow the memory.
func (s *sessions) create(d auth.TokenDigest, name string) (string, error) {
	b := make([]byte, sessionIDBytes)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	id := hex.EncodeToString(b)
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.by) >= s.max {
		s.sweep(now)
	}
	for len(s.by) >= s.max {
		var oldest string
		for k, v := range s.by {
			if oldest == "" || v.seen.Before(s.by[oldest].seen) {
				oldest = k
			}
		}
		delete(s.by, oldest)
	}
	s.by[id] = &heldSession{digest: d, name: name, created: now, seen: now}
	return id, nil
}

// get returns the live session of id (and marks it used), or nil: unknown,
// idle too long, or past its lifetime (then it is forgotten).
func (s *sessions) get(id string) *heldSession {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.by[id]
	if !ok {
		return nil
	}
	if s.expired(e, now) {
		delete(s.by, id)
		return nil
	}
	e.seen = now
	cp := *e
	return &cp
}

// end forgets a session (sign-out, or a token no longer listed).
func (s *sessions) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.by, id)
}

func (s *sessions) expired(e *heldSession, now time.Time) bool {
	return now.Sub(e.seen) > s.idle || now.Sub(e.created) > s.lifetime
}

// sweep forgets the expired sessions; the caller holds mu.
func (s *sessions) sweep(now time.Time) {
	for k, v := range s.by {
		if s.expired(v, now) {
			delete(s.by, k)
		}
	}
}
