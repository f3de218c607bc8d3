package journal

import "github.com/opjournal/opjournal"

// WithAwaitingApproval makes Register call fn with every operation it
// created in awaiting_approval, once the store has recorded it; never for
// a replay of an existing operation. It is how the approval webhooks
// (package webhook) hear of a new question. fn runs on Register's path
// and must return at once without changing op: the webhooks' sender only
// queues it.
func WithAwaitingApproval(fn func(op *opjournal.Operation)) Option {
	return func(s *Service) { s.onAwaitingApproval = fn }
}
