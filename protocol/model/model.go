// Package model is the protocol's independent model: a sequential
// specification of one operation key, written from the protocol's table as
// the manual states it (docs/protocol.md, "The protocol"), not from
// protocol.Apply. It is an independent reading of the specification, so
// that a store which agrees with Apply on every single call but applies a
// rule it should not under concurrency (a guard checked on a stale read)
// is still caught: the linearizability checker (harness/linearize) asks
// it for every answer the journal gave. Where the manual leaves a question
// open, the model's answer is in docs/protocol-answers.md. budget.go is
// the same for a budget counter shared by many keys (docs/budgets.md).
package model

import (
	"fmt"
	"slices"
	"strings"
)

// Kind names a command of the protocol (and Lookup).
type Kind string

// The commands the clients issue.
const (
	Register        Kind = "Register"
	Claim           Kind = "Claim"
	ExtendLease     Kind = "ExtendLease"
	MarkSucceeded   Kind = "MarkSucceeded"
	MarkUnknown     Kind = "MarkUnknown"
	MarkFailedFinal Kind = "MarkFailedFinal"
	RecordCheck     Kind = "RecordCheck"
	ReleaseForRetry Kind = "ReleaseForRetry"
	Escalate        Kind = "Escalate"
	Resolve         Kind = "Resolve"
	Acknowledge     Kind = "Acknowledge"
	Lookup          Kind = "Lookup"
	// Approve and Reject are a person's decisions; Expire is the timeout
	// sweep's ExpireApproval (in process: there is no RPC for it).
	Approve Kind = "Approve"
	Reject  Kind = "Reject"
	Expire  Kind = "Expire"
)

// Kinds is every command the workload draws from.
var Kinds = []Kind{Register, Claim, ExtendLease, MarkSucceeded, MarkUnknown, MarkFailedFinal,
	RecordCheck, ReleaseForRetry, Escalate, Resolve, Acknowledge, Lookup, Approve, Reject, Expire}

// Statuses as the wire shows them (the proto enum without its prefix).
const (
	Pending     = "PENDING"
	InProgress  = "IN_PROGRESS"
	Unknown     = "UNKNOWN"
	Succeeded   = "SUCCEEDED"
	FailedFinal = "FAILED_FINAL"
	Awaiting    = "AWAITING_APPROVAL"
)

// Next steps as the wire shows them.
const (
	NextCallProvider = "CALL_PROVIDER"
	NextReplay       = "REPLAY"
	NextWait         = "WAIT"
	NextVerification = "VERIFICATION_REQUIRED"
	NextFailedFinal  = "FAILED_FINAL"
	NextClaim        = "CLAIM"
	NextAwait        = "AWAIT_APPROVAL"
)

// MaxDuplicates is how many distinct other external ids an operation
// keeps (the README: "the first 10 distinct ids and a count").
const MaxDuplicates = 10

// Action is what the model needs of an action's policy, in milliseconds.
type Action struct {
	Name              string
	LeaseMS           int64 // lease_seconds
	MaxAttemptMS      int64 // max_attempt_seconds
	RetrySameKey      bool  // retry.on_timeout: retry_same_key
	ProviderWindowMS  int64 // retry.provider_dedup_window; 0: none
	DefinitiveAbsence bool  // reconcile.definitive_absence
	ReleaseAfterMS    int64 // visibility_lag + in_flight_window
	// The approval block (approval: required): every registration awaits
	// a person's decision for TimeoutMS, then is rejected or (Escalates)
	// goes under review; TwoPerson needs two approvers.
	Approval  bool
	TwoPerson bool
	Escalates bool
	TimeoutMS int64
}

// Input is one call. Times are milliseconds since the run's base on the
// journal's (test-controlled) database clock; Now is the clock during the
// call, or TimeUnknown when the journal runs on its own clock (process
// runs, whose leases and windows are long enough never to end in a run).
type Input struct {
	Kind    Kind
	Key     string
	Action  string // Register
	Payload int    // Register: which of a few payloads (its request hash); Approve, Reject: the hash of which one the approver saw
	Claim   bool   // Register: with a claim
	Worker  string // Register with a claim, Claim; Approve, Reject: the approver
	Lease   int    // Register with a claim, Claim, ExtendLease: seconds asked (0: the policy's)
	Attempt int    // ExtendLease, Mark*, RecordCheck, ReleaseForRetry
	// ExternalID: MarkSucceeded, Resolve as succeeded. Result is derived
	// from it ("r-" + id), so a replay shows whose result is stored.
	ExternalID string
	ErrorCode  string // MarkUnknown, MarkFailedFinal, Resolve as failed_final, Reject
	Resolution string // Resolve: Succeeded or FailedFinal
	CheckAfter int    // RecordCheck: next_check_after_seconds
	Now        int64
	// REST says the call went over REST rather than gRPC (for the report).
	REST bool
}

// TimeUnknown is Input.Now when the journal's clock is its own.
const TimeUnknown int64 = -1

// View is what a client observes of an operation in an answer. Times are
// milliseconds since the base (0: unset), and zero when the run's clock
// is not the test's. Result is the stored result's "id" member ("" for
// none) and only compared when the answer carries the result (HasResult).
type View struct {
	Status       string
	Attempts     int
	Owner        string
	NeedsReview  bool
	ExternalID   string
	DuplicateID  string // duplicate_external_id
	DuplicateIDs string // duplicate_external_ids, comma-separated
	Reports      int
	ErrorCode    string
	Checks       int
	LeaseUntil   int64
	UnknownSince int64
	NextCheck    int64
	LastChecked  int64
	Started      int64
	FirstAttempt int64
	HasResult    bool
	Result       string
	Approvers    string // the approvals given, their principals comma-separated
	Deadline     int64  // the approval's deadline (0: no approval)
}

// Output is one answer. Maybe says the call's outcome is open (a
// timeout, UNAVAILABLE, a killed server): it may or may not have taken
// effect, and nothing of its answer is known. Err is the opjournal error
// code of a refusal ("" for success); Op is the operation answered (a
// refusal has none).
type Output struct {
	Maybe bool
	Err   string
	Op    View
	// Register and Claim.
	Created      bool
	Claimed      bool
	Attempt      int
	Next         string
	RetryAfter   int
	LeaseSeconds int
	LeaseUntil   int64 // the response's lease_until
}

// State is the model's record of one key: everything a client can
// observe, with the stored (not the effective) status. It is a
// comparable value, so porcupine's == works on it.
type State struct {
	Exists       bool
	Action       string
	Payload      int
	Status       string // stored
	Attempts     int
	Owner        string
	LeaseUntil   int64
	Started      int64
	FirstAttempt int64
	UnknownSince int64
	NextCheck    int64
	LastChecked  int64
	Checks       int
	NeedsReview  bool
	ExternalID   string
	Dups         [MaxDuplicates]string
	NDups        int
	Reports      int
	ErrorCode    string
	Result       string
	// The approval recorded at registration (Approval false: none).
	Approval   bool
	TwoPerson  bool
	Escalates  bool
	Deadline   int64
	Approvers  [2]string
	NApprovers int
}

// Model is the sequential specification over the actions of a run.
type Model struct {
	Actions map[string]Action
}

// Agree reports whether the journal's answer got is the model's want. With
// times false (the journal's own clock) no time is compared.
func Agree(want, got Output, times bool) bool {
	if !times {
		want, got = untimed(want), untimed(got)
	}
	if !want.Op.HasResult || !got.Op.HasResult {
		want.Op.HasResult, want.Op.Result, got.Op.HasResult, got.Op.Result = false, "", false, ""
	}
	return want == got
}

func untimed(o Output) Output {
	o.RetryAfter, o.LeaseUntil = 0, 0
	v := &o.Op
	v.LeaseUntil, v.UnknownSince, v.NextCheck, v.LastChecked, v.Started, v.FirstAttempt, v.Deadline = 0, 0, 0, 0, 0, 0, 0
	return o
}

// now is the model's time of a call: with the journal's own clock, a
// moment at which no lease of a run has ended and no window has passed.
func now(in Input) int64 {
	if in.Now == TimeUnknown {
		return 1
	}
	return in.Now
}

// effective is the status a read shows: in_progress whose lease has ended
// (lease_until ≤ now, "ended on the database clock") is unknown.
func (s State) effective(t int64) string {
	if s.Status == InProgress && s.LeaseUntil <= t {
		return Unknown
	}
	return s.Status
}

func terminal(st string) bool { return st == Succeeded || st == FailedFinal }

// view is what an answer shows of s at t.
func (s State) view(t int64, result bool) View {
	v := View{
		Status: s.effective(t), Attempts: s.Attempts, Owner: s.Owner, NeedsReview: s.NeedsReview,
		ExternalID: s.ExternalID, DuplicateIDs: strings.Join(s.Dups[:s.NDups], ","), Reports: s.Reports,
		ErrorCode: s.ErrorCode, Checks: s.Checks, LeaseUntil: s.LeaseUntil, UnknownSince: s.UnknownSince,
		NextCheck: s.NextCheck, LastChecked: s.LastChecked, Started: s.Started, FirstAttempt: s.FirstAttempt,
		HasResult: result, Result: s.Result, Approvers: strings.Join(s.Approvers[:s.NApprovers], ","), Deadline: s.Deadline,
	}
	if s.NDups > 0 {
		v.DuplicateID = s.Dups[0]
	}
	// An expired lease reads as unknown since the lease's end.
	v.UnknownSince = s.unknownSince(t)
	return v
}

// registerView is what a Register's answer shows of an operation: a
// terminal one's final record, without the review bookkeeping it may
// still change (journal.finalRecord), which Lookup shows.
func registerView(v View) View {
	if terminal(v.Status) {
		v.NeedsReview, v.DuplicateID, v.DuplicateIDs, v.Reports = false, "", "", 0
	}
	return v
}

// issued: 1 ≤ attempt ≤ attempt_count ("attempt issued").
func (s State) issued(a int) bool { return a >= 1 && a <= s.Attempts }

// Step applies in to s: the answer the protocol gives and the next state.
func (m *Model) Step(s State, in Input) (Output, State) {
	t := now(in)
	refuse := func(code string) (Output, State) { return Output{Err: code}, s }
	// Validation comes before the key is looked up: attempt 0 is a
	// malformed request whatever the key (docs/protocol-answers.md).
	switch in.Kind {
	case ExtendLease, MarkSucceeded, MarkUnknown, MarkFailedFinal, RecordCheck, ReleaseForRetry:
		if in.Attempt < 1 {
			return refuse("INVALID_ARGUMENT")
		}
	}
	if !s.Exists && in.Kind != Register {
		return refuse("NOT_FOUND")
	}
	act := m.Actions[s.Action]
	if in.Kind == Register {
		act = m.Actions[in.Action]
	}
	lease := int64(in.Lease) * 1000
	if lease == 0 {
		lease = act.LeaseMS
	}
	c := &call{m: m, s: s, in: in, t: t, act: act, lease: lease, eff: s.effective(t)}

	switch in.Kind {
	case Register:
		return c.register()
	case Claim:
		return c.claim()
	case ExtendLease:
		return c.extendLease()
	case MarkSucceeded:
		return c.markSucceeded()
	case MarkUnknown, MarkFailedFinal:
		return c.markFailure()
	case ReleaseForRetry:
		return c.releaseForRetry()
	case RecordCheck:
		return c.recordCheck()
	case Escalate:
		return c.escalate()
	case Resolve:
		return c.resolve()
	case Acknowledge:
		return c.acknowledge()
	case Lookup:
		return c.lookup()
	case Approve, Reject:
		return c.decide()
	case Expire:
		return c.expire()
	}
	panic("model: unknown command " + string(in.Kind))
}

// call is one command's step: the command, the state it applies to, and
// what Step worked out before choosing the command's rules.
type call struct {
	m     *Model
	s     State
	in    Input
	t     int64  // the call's time
	act   Action // the operation's action
	lease int64  // the lease asked, or the action's
	eff   string // the effective status at t
}

// refuse answers code and changes nothing.
func (c *call) refuse(code string) (Output, State) { return Output{Err: code}, c.s }

// answer is the operation as n, with its result when result is true.
func (c *call) answer(n State, result bool) (Output, State) {
	return Output{Op: n.view(c.t, result)}, n
}

// register is Register.
func (c *call) register() (Output, State) {
	m, s, in, t, act, lease, eff, refuse := c.m, c.s, c.in, c.t, c.act, c.lease, c.eff, c.refuse
	if !s.Exists {
		n := State{Exists: true, Action: in.Action, Payload: in.Payload, Status: Pending}
		if act.Approval { // awaiting a person, with or without a claim asked
			n.Status, n.Approval, n.TwoPerson, n.Escalates, n.Deadline = Awaiting, true, act.TwoPerson, act.Escalates, t+act.TimeoutMS
			return Output{Op: n.view(t, true), Created: true, Next: NextAwait, RetryAfter: n.awaitRetryAfter(t)}, n
		}
		if in.Claim {
			n.Status, n.Attempts, n.Owner, n.LeaseUntil, n.Started, n.FirstAttempt = InProgress, 1, in.Worker, t+lease, t, t
			return Output{Op: n.view(t, true), Created: true, Claimed: true, Attempt: 1, Next: NextCallProvider,
				LeaseSeconds: int(lease / 1000), LeaseUntil: t + lease}, n
		}
		return Output{Op: n.view(t, true), Created: true, Next: NextClaim}, n
	}
	if s.Action != in.Action || s.Payload != in.Payload {
		return refuse("PAYLOAD_MISMATCH")
	}
	if !in.Claim {
		out := Output{Op: registerView(s.view(t, true)), Next: next(s, t, false)}
		if eff == Awaiting {
			out.RetryAfter = s.awaitRetryAfter(t)
		}
		return out, s
	}
	// A replay with a claim is a replay, then a claim, as one step.
	out, n := m.claim(s, in, act, t, lease)
	out.Created = false
	out.Op = registerView(out.Op)
	return out, n
}

// claim is Claim.
func (c *call) claim() (Output, State) {
	m, s, in, t, act, lease := c.m, c.s, c.in, c.t, c.act, c.lease
	return m.claim(s, in, act, t, lease)
}

// extendLease is ExtendLease.
func (c *call) extendLease() (Output, State) {
	s, in, t, act, lease, eff, refuse, answer := c.s, c.in, c.t, c.act, c.lease, c.eff, c.refuse, c.answer
	switch {
	case !s.issued(in.Attempt):
		return refuse("INVALID_ARGUMENT")
	case in.Attempt != s.Attempts, eff != InProgress:
		return refuse("STALE_ATTEMPT")
	case !(t < s.Started+act.MaxAttemptMS):
		return refuse("INVALID_STATE")
	}
	n := s
	n.LeaseUntil = min(t+lease, s.Started+act.MaxAttemptMS)
	return answer(n, false)
}

// markSucceeded is MarkSucceeded.
func (c *call) markSucceeded() (Output, State) {
	s, in, refuse, answer := c.s, c.in, c.refuse, c.answer
	if !s.issued(in.Attempt) {
		return refuse("INVALID_ARGUMENT")
	}
	n := s
	newDup := in.ExternalID != "" && in.ExternalID != s.ExternalID && !slices.Contains(s.Dups[:s.NDups], in.ExternalID) && s.NDups < MaxDuplicates
	addDup := func() {
		if newDup {
			n.Dups[n.NDups] = in.ExternalID
			n.NDups++
		}
		n.Reports++
	}
	switch {
	case !terminal(s.Status): // confirm
		n.Status, n.ExternalID, n.Result = Succeeded, in.ExternalID, result(in.ExternalID)
		n.LeaseUntil, n.UnknownSince, n.NextCheck = 0, 0, 0
	case s.Status == Succeeded && (in.ExternalID == "" || in.ExternalID == s.ExternalID): // repeat
	case s.Status == FailedFinal && !s.NeedsReview: // effect after failed_final
		n.NeedsReview = true
		addDup()
	case newDup && !s.NeedsReview: // duplicate effect
		n.NeedsReview = true
		addDup()
	default: // another duplicate, repeated report
		addDup()
	}
	return answer(n, false)
}

// markFailure is MarkUnknown and MarkFailedFinal.
func (c *call) markFailure() (Output, State) {
	s, in, t, eff, refuse, answer := c.s, c.in, c.t, c.eff, c.refuse, c.answer
	switch {
	case !s.issued(in.Attempt):
		return refuse("INVALID_ARGUMENT")
	case in.Attempt != s.Attempts, eff != InProgress:
		return refuse("STALE_ATTEMPT")
	}
	n := s
	n.ErrorCode, n.LeaseUntil = in.ErrorCode, 0
	if in.Kind == MarkUnknown {
		n.Status, n.UnknownSince = Unknown, t
	} else {
		n.Status, n.UnknownSince, n.Result = FailedFinal, 0, ""
	}
	return answer(n, false)
}

// releaseForRetry is ReleaseForRetry.
func (c *call) releaseForRetry() (Output, State) {
	s, in, t, act, eff, refuse, answer := c.s, c.in, c.t, c.act, c.eff, c.refuse, c.answer
	switch {
	case !s.issued(in.Attempt):
		return refuse("INVALID_ARGUMENT")
	case in.Attempt != s.Attempts:
		return refuse("STALE_ATTEMPT")
	case eff != Unknown, s.NeedsReview, !act.DefinitiveAbsence, !(t-s.unknownSince(t) >= act.ReleaseAfterMS):
		return refuse("INVALID_STATE")
	}
	n := s
	n.Status, n.LeaseUntil, n.UnknownSince, n.NextCheck = Pending, 0, 0, 0
	return answer(n, true)
}

// recordCheck is RecordCheck.
func (c *call) recordCheck() (Output, State) {
	s, in, t, eff, refuse, answer := c.s, c.in, c.t, c.eff, c.refuse, c.answer
	switch {
	case !s.issued(in.Attempt):
		return refuse("INVALID_ARGUMENT")
	case in.Attempt != s.Attempts:
		return refuse("STALE_ATTEMPT")
	case eff != Unknown:
		return refuse("INVALID_STATE")
	}
	n := s
	if s.Status == InProgress { // an expired lease becomes unknown for good
		n.UnknownSince = s.LeaseUntil
	}
	n.Status, n.LeaseUntil, n.Checks, n.LastChecked, n.NextCheck = Unknown, 0, s.Checks+1, t, t+int64(in.CheckAfter)*1000
	return answer(n, true)
}

// escalate is Escalate.
func (c *call) escalate() (Output, State) {
	s, eff, refuse, answer := c.s, c.eff, c.refuse, c.answer
	switch {
	case !terminal(eff) && eff != Awaiting && !s.NeedsReview:
		n := s
		n.NeedsReview = true
		return answer(n, true)
	case s.NeedsReview: // already under review
		return answer(s, true)
	}
	return refuse("INVALID_STATE")
}

// resolve is Resolve.
func (c *call) resolve() (Output, State) {
	s, in, eff, refuse, answer := c.s, c.in, c.eff, c.refuse, c.answer
	if terminal(eff) || eff == Awaiting || !(eff == Unknown || s.NeedsReview) {
		return refuse("INVALID_STATE")
	}
	n := s
	n.NeedsReview, n.LeaseUntil, n.UnknownSince, n.NextCheck = false, 0, 0, 0
	if in.Resolution == Succeeded {
		n.Status, n.ExternalID, n.Result = Succeeded, in.ExternalID, result(in.ExternalID)
	} else {
		n.Status = FailedFinal
		if in.ErrorCode != "" {
			n.ErrorCode = in.ErrorCode
		}
	}
	return answer(n, true)
}

// acknowledge is Acknowledge.
func (c *call) acknowledge() (Output, State) {
	s, eff, refuse, answer := c.s, c.eff, c.refuse, c.answer
	if !terminal(eff) || !s.NeedsReview {
		return refuse("INVALID_STATE")
	}
	n := s
	n.NeedsReview = false
	return answer(n, true)
}

// lookup is Lookup.
func (c *call) lookup() (Output, State) {
	s, answer := c.s, c.answer
	return answer(s, true)
}

// decide is Approve and Reject.
func (c *call) decide() (Output, State) {
	s, in, t, eff, refuse, answer := c.s, c.in, c.t, c.eff, c.refuse, c.answer
	switch {
	case eff != Awaiting:
		return refuse("INVALID_STATE")
	case in.Payload != s.Payload: // the hash the approver saw is another request's
		return refuse("PAYLOAD_MISMATCH")
	case !(t < s.Deadline || s.NeedsReview): // timed out, and not escalated
		return refuse("INVALID_STATE")
	}
	n := s
	if in.Kind == Reject {
		n.Status, n.NeedsReview, n.ErrorCode = FailedFinal, false, in.ErrorCode
		if n.ErrorCode == "" {
			n.ErrorCode = "approval_rejected"
		}
		return answer(n, true)
	}
	if slices.Contains(s.Approvers[:s.NApprovers], in.Worker) {
		return refuse("INVALID_STATE") // the same person twice
	}
	n.Approvers[n.NApprovers] = in.Worker
	n.NApprovers++
	if !s.TwoPerson || n.NApprovers == 2 { // released
		n.Status, n.NeedsReview = Pending, false
	}
	return answer(n, true)
}

// expire is Expire.
func (c *call) expire() (Output, State) {
	s, t, eff, refuse, answer := c.s, c.t, c.eff, c.refuse, c.answer
	switch {
	case eff != Awaiting, s.NeedsReview, t < s.Deadline:
		return refuse("INVALID_STATE")
	}
	n := s
	if s.Escalates {
		n.NeedsReview = true
	} else {
		n.Status, n.ErrorCode = FailedFinal, "approval_timeout"
	}
	return answer(n, true)
}

// claim is Claim's two rules: win, or lost with the current state.
func (m *Model) claim(s State, in Input, act Action, t, lease int64) (Output, State) {
	eff := s.effective(t)
	win := !s.NeedsReview && (eff == Pending ||
		(act.RetrySameKey && eff == Unknown && (act.ProviderWindowMS == 0 || t < s.FirstAttempt+act.ProviderWindowMS)))
	if !win {
		out := Output{Op: s.view(t, true), Next: next(s, t, true)}
		switch eff {
		case InProgress: // another worker's live lease: seconds until it ends
			out.RetryAfter = int((s.LeaseUntil - t + 999) / 1000)
		case Awaiting:
			out.RetryAfter = s.awaitRetryAfter(t)
		}
		return out, s
	}
	n := s
	n.Status, n.Attempts, n.Owner, n.LeaseUntil = InProgress, s.Attempts+1, in.Worker, t+lease
	n.UnknownSince, n.NextCheck, n.Started, n.ErrorCode = 0, 0, t, ""
	if n.FirstAttempt == 0 {
		n.FirstAttempt = t
	}
	return Output{Op: n.view(t, true), Claimed: true, Attempt: n.Attempts, Next: NextCallProvider,
		LeaseSeconds: int(lease / 1000), LeaseUntil: t + lease}, n
}

// unknownSince is when the outcome became unknown: the lease's end for an
// expired lease, else unknown_since ("the attempt really ended").
func (s State) unknownSince(t int64) int64 {
	if s.Status == InProgress && s.LeaseUntil <= t {
		return s.LeaseUntil
	}
	return s.UnknownSince
}

// awaitRetryAfter is the hint to ask again about an operation awaiting
// approval: 30 s, less before the deadline, at least 1 s (whole seconds,
// rounded up).
func (s State) awaitRetryAfter(t int64) int {
	ms := min(30_000, s.Deadline-t)
	return int(max(1, (ms+999)/1000))
}

// next is the README's next step for a caller that did not win a claim:
// a confirmed effect is replayed and a rejection answered, also under
// review (terminal first); else unknown or under review needs
// verification, a live lease is waited for, and a pending operation
// registered without a claim is claimed.
func next(s State, t int64, claimAsked bool) string {
	switch eff := s.effective(t); {
	case eff == Succeeded:
		return NextReplay
	case eff == FailedFinal:
		return NextFailedFinal
	case eff == Awaiting: // a person decides, also after an escalated timeout
		return NextAwait
	case s.NeedsReview, eff == Unknown:
		return NextVerification
	case eff == InProgress:
		return NextWait
	case !claimAsked:
		return NextClaim
	}
	return NextWait
}

// result is the stored result of an effect with external id id.
func result(id string) string {
	if id == "" {
		return ""
	}
	return "r-" + id
}

// Describe is one call and its answer in words, for a failed check.
func Describe(in Input, out Output) string {
	var b strings.Builder
	via := "grpc"
	if in.REST {
		via = "rest"
	}
	fmt.Fprintf(&b, "%s %s", in.Kind, in.Key)
	switch in.Kind {
	case Register:
		fmt.Fprintf(&b, " payload=%d claim=%v worker=%s", in.Payload, in.Claim, in.Worker)
	case Claim:
		fmt.Fprintf(&b, " worker=%s", in.Worker)
	case ExtendLease, MarkUnknown, MarkFailedFinal, RecordCheck, ReleaseForRetry:
		fmt.Fprintf(&b, " attempt=%d", in.Attempt)
	case MarkSucceeded:
		fmt.Fprintf(&b, " attempt=%d ext=%q", in.Attempt, in.ExternalID)
	case Resolve:
		fmt.Fprintf(&b, " as=%s ext=%q code=%q", in.Resolution, in.ExternalID, in.ErrorCode)
	case Approve, Reject:
		fmt.Fprintf(&b, " by=%s hash-of=%d code=%q", in.Worker, in.Payload, in.ErrorCode)
	}
	if in.Now != TimeUnknown {
		fmt.Fprintf(&b, " @%dms", in.Now)
	}
	fmt.Fprintf(&b, " (%s) → ", via)
	switch {
	case out.Maybe:
		b.WriteString("maybe (outcome open)")
	case out.Err != "":
		b.WriteString(out.Err)
	default:
		fmt.Fprintf(&b, "%+v", out.Op)
		if in.Kind == Register || in.Kind == Claim {
			fmt.Fprintf(&b, " created=%v claimed=%v attempt=%d next=%s retry_after=%d lease=%ds", out.Created, out.Claimed, out.Attempt, out.Next, out.RetryAfter, out.LeaseSeconds)
		}
	}
	return b.String()
}
