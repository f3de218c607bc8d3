package failover

import (
	"fmt"
	"sync"
	"time"

	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// state is an operation's state as one journal answer showed it.
type state struct {
	status  pb.Status
	attempt int32 // attempt_count: the fencing token, never decreases
	review  bool  // needs_review
}

func stateOf(op *pb.Operation) state {
	return state{status: op.GetStatus(), attempt: op.GetAttemptCount(), review: op.GetNeedsReview()}
}

func (s state) terminal() bool {
	return s.status == pb.Status_STATUS_SUCCEEDED || s.status == pb.Status_STATUS_FAILED_FINAL
}

// rank orders the states of one attempt as the protocol (protocol/table.go)
// moves through them: pending (attempt 0) → in_progress → unknown (by
// MarkUnknown, a lease that ran out, RecordCheck) → pending again after
// ReleaseForRetry (the attempt count stays; the next claim raises it) →
// succeeded or failed_final, which never change again. An unknown
// operation is claimed again (retry_same_key) only with a new attempt.
func (s state) rank() int {
	switch s.status {
	case pb.Status_STATUS_PENDING:
		if s.attempt > 0 {
			return 2 // released after unknown
		}
		return 0
	case pb.Status_STATUS_IN_PROGRESS:
		return 1
	case pb.Status_STATUS_UNKNOWN:
		return 2
	case pb.Status_STATUS_SUCCEEDED, pb.Status_STATUS_FAILED_FINAL:
		return 3
	}
	return -1
}

// atOrAfter reports whether s is the state a, or one the protocol can
// reach from a: a later attempt, or a later step of the same attempt; a
// terminal state only as itself; needs_review only cleared by a
// resolution (which is terminal).
func (s state) atOrAfter(a state) bool {
	switch {
	case a.terminal():
		return s.status == a.status
	case s.attempt < a.attempt:
		return false
	case a.review && !s.review && !s.terminal():
		return false
	case s.attempt > a.attempt:
		return true
	}
	return s.rank() >= a.rank()
}

func (s state) String() string {
	name := map[pb.Status]string{pb.Status_STATUS_PENDING: "pending", pb.Status_STATUS_IN_PROGRESS: "in_progress",
		pb.Status_STATUS_UNKNOWN: "unknown", pb.Status_STATUS_SUCCEEDED: "succeeded", pb.Status_STATUS_FAILED_FINAL: "failed_final"}[s.status]
	if name == "" {
		name = s.status.String()
	}
	out := fmt.Sprintf("%s/attempt %d", name, s.attempt)
	if s.review {
		out += "/needs_review"
	}
	return out
}

// ack is the latest state the journal acknowledged for a key.
type ack struct {
	state
	at time.Time // when that answer arrived
}

// ledger is what the agents were told: per key the latest state a
// successful journal answer (Register, Claim, ExtendLease, Mark*) showed,
// recorded only after the answer arrived. Answers for one key can arrive
// out of order (a late MarkSucceeded of an abandoned attempt beside the
// next Register), so an entry only ever moves forward.
type ledger struct {
	mu      sync.Mutex
	acks    map[string]ack
	created map[string]int // Register answers with created=true, per key
}

func newLedger() *ledger { return &ledger{acks: map[string]ack{}, created: map[string]int{}} }

// record notes an acknowledged state and returns the entry acknowledged
// before the call started (ok false if none), for the caller to compare
// with the answer.
func (l *ledger) record(key string, s state, started time.Time) (before ack, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev, had := l.acks[key]
	if !had || s.atOrAfter(prev.state) && s != prev.state {
		l.acks[key] = ack{state: s, at: time.Now()}
	}
	return prev, had && prev.at.Before(started)
}

// acked reports whether key was acknowledged before t.
func (l *ledger) acked(key string, t time.Time) (ack, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok := l.acks[key]
	return a, ok && a.at.Before(t)
}

// noteCreated counts a Register answered created=true and returns the
// count for the key.
func (l *ledger) noteCreated(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.created[key]++
	return l.created[key]
}

func (l *ledger) createdCount(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.created[key]
}

// snapshot copies the entries.
func (l *ledger) snapshot() map[string]ack {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]ack, len(l.acks))
	for k, v := range l.acks {
		out[k] = v
	}
	return out
}

func (l *ledger) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acks)
}
