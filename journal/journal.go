// Package journal is the operation journal's service: it validates every
// request, applies the action's policy, computes the request hash, and asks
// the store for the one atomic transition the request needs. Transports
// (server/) call it; it knows nothing of gRPC or HTTP.
package journal

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/protocol/canonjson"
	"github.com/opjournal/opjournal/protocol/hashkey"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/store"
)

// Limits bound what a caller may store.
type Limits struct {
	// MaxPayloadBytes bounds a payload's canonical JSON.
	MaxPayloadBytes int
	// MaxResultBytes bounds a result's canonical JSON.
	MaxResultBytes int
}

// DefaultLimits are 64 KiB each, the limits docs/api.md states.
var DefaultLimits = Limits{MaxPayloadBytes: 64 << 10, MaxResultBytes: 64 << 10}

// Field length limits (opjournal's, the protocol's one home for them).
const (
	MaxKeyLen        = opjournal.MaxKeyLen
	MaxActionLen     = opjournal.MaxActionLen
	MaxWorkerIDLen   = opjournal.MaxWorkerIDLen
	MaxExternalIDLen = opjournal.MaxExternalIDLen
	MaxErrorCodeLen  = opjournal.MaxErrorCodeLen
)

// Service is the journal. It is safe for concurrent use; all coordination
// happens in the store's database.
type Service struct {
	store  store.Store
	policy *policy.Policy
	// acts holds one copy of each action's policy, made at New: Policy.Action
	// deep-copies the action on every call (2% of a fused call's server
	// CPU), and the journal only reads it.
	acts     map[string]*policy.Action
	limits   Limits
	redacts  []string      // every member name some action redacts
	actions  *actionCache  // (tenant, key) → action, for Claim
	hashKeys *hashkey.Ring // keys of the keyed request hash (actions with redact_fields)
	// payloadOpts holds each action's canonjson options, made once: the
	// policy is immutable, and PayloadOptions is on every gRPC Register's
	// path, where Policy.Action's defensive copy would cost allocations.
	payloadOpts map[string]canonjson.Options
	// watch wakes Lookup's long polls when this process decides an
	// approval (watch.go).
	watch watchers
	// replays answers replays of terminal operations (replaycache.go);
	// nil when disabled.
	replays      *replayCache
	replayConfig ReplayCacheConfig
	// schemas remembers the requests validated against their action's
	// payload_schema (schemacache.go).
	schemas *schemaChecks
	// onAwaitingApproval is told of each operation Register created
	// awaiting approval (WithAwaitingApproval, notify.go); nil for none.
	onAwaitingApproval func(*opjournal.Operation)
}

// Option configures a Service.
type Option func(*Service)

// WithHashKeys gives the keys of the keyed request hash, which actions
// with redact_fields use (package hashkey). Without it a Service makes a
// random key that lives as long as the process: fine for tests, wrong for
// a server (after a restart no replay of such an action matches), so
// `opjournal serve` always gives one.
func WithHashKeys(r *hashkey.Ring) Option { return func(s *Service) { s.hashKeys = r } }

// New returns a Service over st enforcing pol. Zero limits take DefaultLimits.
func New(st store.Store, pol *policy.Policy, limits Limits, opts ...Option) *Service {
	if limits.MaxPayloadBytes <= 0 {
		limits.MaxPayloadBytes = DefaultLimits.MaxPayloadBytes
	}
	if limits.MaxResultBytes <= 0 {
		limits.MaxResultBytes = DefaultLimits.MaxResultBytes
	}
	s := &Service{store: st, policy: pol, limits: limits, redacts: redactNames(pol), actions: newActionCache(actionCacheSize),
		payloadOpts: map[string]canonjson.Options{}, replayConfig: ReplayCacheConfig{Size: DefaultReplayCacheSize}, schemas: newSchemaChecks()}
	s.acts = make(map[string]*policy.Action)
	for _, name := range pol.Names() {
		if a, ok := pol.Action(name); ok {
			s.acts[name] = a
			s.payloadOpts[name] = canonjson.Options{IntegerFields: a.IntegerFields}
		}
	}
	for _, o := range opts {
		o(s)
	}
	if s.hashKeys == nil {
		s.hashKeys, _ = hashkey.New(hashkey.Random("process"))
	}
	s.replays = newReplayCache(s.replayConfig, func(action string) (time.Duration, bool) {
		a, ok := s.actionPolicy(action)
		if !ok {
			return 0, false
		}
		return a.Retention, true
	})
	return s
}

// actionPolicy is the policy of the action named, shared: callers must
// not change it.
func (s *Service) actionPolicy(name string) (*policy.Action, bool) {
	a, ok := s.acts[name]
	return a, ok
}

// Policy returns the policy the service enforces.
func (s *Service) Policy() *policy.Policy { return s.policy }

// Caller is who makes a request: the tenant whose operations it sees and,
// with authentication, the principal. The history records the principal
// as the actor of every change it makes (its label beside it); what a
// request states about who it acts for is kept as stated_actor.
//
// One person is one principal: every rule that compares callers (an
// approval's requester, two_person, the history's actor) compares
// Principal, the id, and never Label.
type Caller struct {
	Tenant string
	// Principal is the authenticated principal's id (auth.Principal.ID:
	// the same for all of one person's tokens); "" without authentication.
	Principal string
	// Label is the authenticated credential's label for people to read
	// (a token's name, a JWT's subject): recorded beside the id, never
	// compared.
	Label string
	// FormerNames are the names under which records written before
	// principal ids may name this principal (auth.Principal.FormerNames).
	// An approval recorded then (without labels) is compared against them
	// as well as the id, so that the old record's person is still refused
	// what the rule refuses them: the reading fails closed.
	FormerNames []string
	// Roles are the authenticated principal's roles (auth.Role names);
	// nil without authentication. Decisions that the policy reserves to
	// some roles (an approval's approvers) check them.
	Roles []string
}

// who returns the actor and stated actor of a change: the principal, or
// (without authentication) what the caller stated.
func (c Caller) who(stated string) (actor, statedActor string) {
	if c.Principal != "" {
		return c.Principal, stated
	}
	return stated, stated
}

// is reports whether a principal recorded by a rule is this caller: the
// same id, or, on a record written before principal ids (legacy: it holds
// no label), one of the caller's former names.
func (c Caller) is(recorded string, legacy bool) bool {
	if recorded == "" {
		return false
	}
	if recorded == c.Principal {
		return true
	}
	return legacy && c.Principal != "" && slices.Contains(c.FormerNames, recorded)
}

// display names the caller for people: its label, with the id beside it
// when they differ.
func (c Caller) display(actor string) string {
	if c.Principal == "" || c.Label == "" || c.Label == c.Principal {
		return actor
	}
	return c.Label + " (principal " + c.Principal + ")"
}

// Limits returns the limits in force.
func (s *Service) Limits() Limits { return s.limits }

// Ping checks the store.
func (s *Service) Ping(ctx context.Context) error { return s.store.Ping(ctx) }

// BatchStat describes how the store groups one kind of call
// (store.BatchStat; named here so that transports need not know the
// store).
type BatchStat = store.BatchStat

// BatchStats reports how the store groups calls into shared statements
// (nil for a store that does not).
func (s *Service) BatchStats() []BatchStat {
	if b, ok := s.store.(store.Batching); ok {
		return b.BatchStats()
	}
	return nil
}

// ClaimOptions asks for a lease.
type ClaimOptions struct {
	WorkerID string
	// LeaseSeconds of 0 means the policy's lease_seconds; more than it is an error.
	LeaseSeconds int
}

// RegisterRequest registers an operation.
type RegisterRequest struct {
	Caller
	Key     string
	Action  string
	Payload json.RawMessage // a JSON object; nil is "missing"
	// Envelope, if not nil, is the request already in canonical form, and
	// Payload is ignored: the envelope canonjson.StructRequest returned for
	// Action with the options PayloadOptions(Action) gives. Register then
	// takes the payload from it instead of parsing JSON text again; that
	// is how the gRPC transport, which holds the payload as a Struct, hands
	// it over. An envelope that names another action is CodeInternal.
	Envelope json.RawMessage
	// PayloadRefused, if not nil, is the transport's refusal of the
	// payload while making it canonical (canonjson's *Error, naming the
	// value): Register reports it, with the field "payload" and the
	// value's path, where it checks the payload, so that a request wrong
	// in several ways is refused for the same thing through every door.
	PayloadRefused error
	// Refs are business references (order_id → 817): stored, searchable,
	// immutable, and part of neither the key nor the request hash.
	Refs map[string]string
	// ParentKey is the key of the operation this one is a side effect of.
	ParentKey string
	Claim     *ClaimOptions
}

// RegisterResult is what Register did.
type RegisterResult struct {
	Operation *opjournal.Operation
	// Created is true when this call inserted the operation.
	Created bool
	// Claim is set when RegisterRequest.Claim was.
	Claim *ClaimResult
	// RetryAfter is when to ask again about an operation awaiting
	// approval (database clock: at most 30 s, less before its deadline).
	RetryAfter time.Duration
}

// ClaimResult is the outcome of a claim.
type ClaimResult struct {
	Operation *opjournal.Operation
	// Claimed is true when the caller now holds the lease; the attempt is
	// Operation.AttemptCount and the lease ends at Operation.LeaseUntil.
	Claimed bool
	// RetryAfter is how long another worker's live lease still runs (by the
	// database clock), when that is why the claim was lost.
	RetryAfter time.Duration
}

// claimResult is the claim part of what the store applied.
func claimResult(a store.Applied) ClaimResult {
	return ClaimResult{Operation: a.Operation, Claimed: a.Claimed, RetryAfter: a.RetryAfter}
}

// apply hands c to the store on behalf of caller, who is recorded as the
// actor (with stated, what the request says it acts as, beside it: see
// Caller.who), and names the command and key in the error.
func (s *Service) apply(ctx context.Context, caller Caller, stated string, c *protocol.Command) (store.Applied, error) {
	c.Actor, c.StatedActor = caller.who(stated)
	if caller.Principal != "" {
		c.ActorLabel = caller.Label
	}
	t := s.replays.ticket(caller.Tenant, c.Key)
	a, err := s.store.Apply(ctx, caller.Tenant, c)
	if err != nil {
		return store.Applied{}, fmt.Errorf("%s %q: %w", store.Verb(c.Kind), c.Key, err)
	}
	// Keep what a replay or a terminal mark returned for the next replay
	// (replaycache.go). Register never changes a terminal row; every
	// other command may (a duplicate report, Acknowledge, SetNote).
	if c.Kind == protocol.CmdRegister {
		if !a.Created {
			s.replays.fill(t, a.Operation)
		}
	} else {
		s.replays.afterChange(t, caller.Tenant, a.Operation)
	}
	return a, nil
}

// applyOp is apply for the commands that answer with the operation.
func (s *Service) applyOp(ctx context.Context, caller Caller, stated string, c *protocol.Command) (*opjournal.Operation, error) {
	a, err := s.apply(ctx, caller, stated, c)
	return a.Operation, err
}

// firstError is the first of the checks that failed, nil if none did:
// the validations of a request, in the order they are reported.
func firstError(checks ...error) error {
	for _, err := range checks {
		if err != nil {
			return err
		}
	}
	return nil
}

// Register validates req, computes its request hash and records it. It
// returns CodeInvalidArgument, CodeUnknownAction or CodeTooLarge for bad
// input and CodePayloadMismatch when the key holds another request, and in
// those cases changes nothing.
func (s *Service) Register(ctx context.Context, req RegisterRequest) (RegisterResult, error) {
	if err := checkKey(req.Key); err != nil {
		return RegisterResult{}, err
	}
	act, err := s.action(req.Action)
	if err != nil {
		return RegisterResult{}, err
	}
	if req.Payload == nil && req.Envelope == nil && req.PayloadRefused == nil {
		return RegisterResult{}, opjournal.Errorf(opjournal.CodeInvalidArgument, "payload", "is required (a JSON object; {} for none)")
	}
	c := &protocol.Command{Kind: protocol.CmdRegister, Key: req.Key, Action: act.Name, Refs: req.Refs, ParentKey: req.ParentKey}
	stated := ""
	if req.Claim != nil {
		if err := claimPolicy(c, act, req.Claim.WorkerID, req.Claim.LeaseSeconds, "claim."); err != nil {
			return RegisterResult{}, err
		}
		c.Claim, stated = true, req.Claim.WorkerID
	}
	if err := checkLinks(act, req.Key, req.Refs, req.ParentKey); err != nil {
		return RegisterResult{}, err
	}
	var envelope, canonical json.RawMessage
	switch {
	case req.PayloadRefused != nil:
		err = JSONError("payload", req.PayloadRefused)
	case req.Envelope != nil:
		envelope, canonical, err = s.checkEnvelope(act, req.Envelope)
	default:
		envelope, canonical, err = s.checkPayload(act, req.Payload)
	}
	if err != nil {
		return RegisterResult{}, err
	}
	c.RequestHash, c.HashKeyID, c.HashFor = s.requestHash(act, envelope)
	if err := s.schemas.check(act, c.HashKeyID, c.RequestHash, canonical); err != nil {
		return RegisterResult{}, err
	}
	if res, ok := s.replayed(req, c); ok {
		return res, nil
	}
	// The hash covers the whole payload; what is stored has the policy's
	// redact_fields blanked, so no secret reaches the table.
	stored, err := redact(canonical, act.RedactFields)
	if err != nil {
		return RegisterResult{}, err
	}
	c.Payload = stored
	// The approval is decided here, once, on the whole payload (before
	// redaction: a when may read a redacted member); the store records it
	// on a new row and ignores it for an existing one, so a policy change
	// never re-opens a decided question.
	c.Approval, c.ApprovalTimeout = approvalOf(act, canonical, req.Refs, req.Caller, stated)
	// The budgets too are evaluated on the whole payload; the store
	// decides on them only for a new key.
	if err := budgetCharges(c, act, canonical, req.Caller, stated); err != nil {
		return RegisterResult{}, err
	}
	a, err := s.apply(ctx, req.Caller, stated, c)
	if err != nil {
		return RegisterResult{}, err
	}
	s.actions.put(req.Tenant, req.Key, a.Operation.Action)
	a.Operation = finalRecord(a.Operation) // replaycache.go
	if a.Created && a.Operation.Status == opjournal.StatusAwaitingApproval && s.onAwaitingApproval != nil {
		s.onAwaitingApproval(a.Operation)
	}
	res := RegisterResult{Operation: a.Operation, Created: a.Created}
	if a.Operation.Status == opjournal.StatusAwaitingApproval {
		res.RetryAfter = a.RetryAfter
	}
	if c.Claim {
		cr := claimResult(a)
		res.Claim = &cr
	}
	return res, nil
}

// checkPayload validates a payload for act (numbers, integer fields,
// nesting, size) and returns the envelope its request hash covers and
// its canonical form.
func (s *Service) checkPayload(act *policy.Action, payload json.RawMessage) (envelope, canonical json.RawMessage, err error) {
	envelope, canonical, err = canonjson.Request(act.Name, payload, canonjson.Options{IntegerFields: act.IntegerFields})
	if err != nil {
		return nil, nil, JSONError("payload", err)
	}
	if err := s.checkPayloadSize(canonical); err != nil {
		return nil, nil, err
	}
	return envelope, canonical, nil
}

// checkEnvelope is checkPayload for a request a transport has already
// canonicalised (RegisterRequest.Envelope): the validation is done, so it
// confirms that the envelope names act, whose hash it becomes, and checks
// the payload's size, without parsing the payload.
func (s *Service) checkEnvelope(act *policy.Action, envelope json.RawMessage) (json.RawMessage, json.RawMessage, error) {
	canonical, ok := canonjson.EnvelopePayload(envelope, act.Name)
	if !ok {
		return nil, nil, opjournal.Errorf(opjournal.CodeInternal, "payload", "the transport's canonical request is not one for the action %q", act.Name)
	}
	if err := s.checkPayloadSize(canonical); err != nil {
		return nil, nil, err
	}
	return envelope, canonical, nil
}

// checkPayloadSize bounds a canonical payload by Limits.MaxPayloadBytes.
func (s *Service) checkPayloadSize(canonical json.RawMessage) error {
	if len(canonical) > s.limits.MaxPayloadBytes {
		return opjournal.Errorf(opjournal.CodeTooLarge, "payload",
			"is %d bytes as canonical JSON; the limit is %d", len(canonical), s.limits.MaxPayloadBytes)
	}
	return nil
}

// PayloadOptions returns the canonjson options Register validates
// action's payload with (its IntegerFields), for a transport that
// canonicalises the payload itself (RegisterRequest.Envelope); for an
// action the policy does not define, the zero Options, Register then
// refusing the action whatever the payload. The options are shared: the
// caller must not modify them.
func (s *Service) PayloadOptions(action string) canonjson.Options {
	return s.payloadOpts[action]
}

// checkSchema validates a canonical payload against its action's
// payload_schema (if any). Register runs it after every other check of
// the request, so that a request with a bad key is told about the key.
func checkSchema(act *policy.Action, canonical json.RawMessage) error {
	if act.PayloadSchema == nil {
		return nil
	}
	if vs := act.PayloadSchema.Validate(canonical); len(vs) > 0 {
		return schemaError(act.Name, vs)
	}
	return nil
}

// schemaError reports a payload that fails its action's payload_schema:
// the field is the first violation's JSON pointer, the message lists them
// all, and neither quotes a value of the payload.
func schemaError(action string, vs []policy.Violation) error {
	parts := make([]string, len(vs))
	for i, v := range vs {
		where := v.Pointer
		if where == "" {
			where = "the payload"
		}
		parts[i] = where + " " + v.Message
	}
	return opjournal.Errorf(opjournal.CodeInvalidArgument, "payload"+vs[0].Pointer,
		"does not match the payload_schema of %s: %s", action, strings.Join(parts, "; "))
}

// checkLinks validates the business references and parent key of a
// registration against the protocol's limits and the action's policy.
func checkLinks(act *policy.Action, key string, refs map[string]string, parent string) error {
	if err := opjournal.CheckRefs(refs); err != nil {
		return err
	}
	for _, name := range act.Refs.Required {
		if _, ok := refs[name]; !ok {
			return opjournal.Errorf(opjournal.CodeInvalidArgument, "refs/"+name, "is required by the policy of %s", act.Name)
		}
	}
	for name := range refs {
		if slices.Contains(act.Refs.Forbidden, name) {
			return opjournal.Errorf(opjournal.CodeInvalidArgument, "refs/"+name, "is forbidden by the policy of %s (refs are stored in clear and searchable)", act.Name)
		}
		if slices.Contains(act.RedactFields, name) {
			return opjournal.Errorf(opjournal.CodeInvalidArgument, "refs/"+name,
				"is a redacted member of %s (redact_fields): refs are stored in clear and searchable, so it cannot be one", act.Name)
		}
	}
	if parent != "" {
		if err := checkToken("parent_key", parent, MaxKeyLen); err != nil {
			return err
		}
		if parent == key {
			return opjournal.Errorf(opjournal.CodeInvalidArgument, "parent_key", "is the operation's own key; a child needs a key of its own (ChildKey)")
		}
	}
	return nil
}

// requestHash is the request hash of envelope for act: the plain
// SHA-256 (docs/spec.md), or, for an action with redact_fields, an HMAC-SHA256 under the
// current hash key, so that nobody without the key can confirm a guess of
// a redacted value (a CVC) against the hash Lookup returns. hashFor gives
// the request's hash under another key (or "" for the plain hash), to
// compare with an operation registered before a rotation or a policy
// change.
func (s *Service) requestHash(act *policy.Action, envelope []byte) (hash, keyID string, hashFor func(string) (string, bool)) {
	hashFor = func(id string) (string, bool) {
		if id == "" {
			return canonjson.Hash(envelope), true
		}
		k, ok := s.hashKeys.Get(id)
		if !ok {
			return "", false
		}
		return k.Hash(envelope), true
	}
	if len(act.RedactFields) == 0 {
		return canonjson.Hash(envelope), "", hashFor
	}
	k := s.hashKeys.Current()
	return k.Hash(envelope), k.ID, hashFor
}

// ClaimRequest asks for a lease on an existing operation.
type ClaimRequest struct {
	Caller
	Key          string
	WorkerID     string
	LeaseSeconds int
}

// Claim applies the action's policy to a claim. Losing is not an error:
// the result says Claimed = false with the current state.
func (s *Service) Claim(ctx context.Context, req ClaimRequest) (ClaimResult, error) {
	if err := firstError(checkKey(req.Key), checkToken("worker_id", req.WorkerID, MaxWorkerIDLen)); err != nil {
		return ClaimResult{}, err
	}
	// The policy belongs to the operation's action, which is immutable, so
	// reading it before the conditional update cannot race with anything;
	// and remembering it (actioncache.go) cannot be wrong.
	act, err := s.actionOf(ctx, req.Tenant, req.Key)
	if err != nil {
		return ClaimResult{}, fmt.Errorf("claim %q: %w", req.Key, err)
	}
	c := &protocol.Command{Kind: protocol.CmdClaim, Key: req.Key}
	if err := claimPolicy(c, act, req.WorkerID, req.LeaseSeconds, ""); err != nil {
		return ClaimResult{}, err
	}
	a, err := s.apply(ctx, req.Caller, req.WorkerID, c)
	if err != nil {
		return ClaimResult{}, err
	}
	return claimResult(a), nil
}

// actionOf returns the policy of the operation's action (immutable, so
// remembered; see actioncache.go).
func (s *Service) actionOf(ctx context.Context, tenant, key string) (*policy.Action, error) {
	action, ok := s.actions.get(tenant, key)
	if !ok {
		op, err := s.store.Get(ctx, tenant, key)
		if err != nil {
			return nil, err
		}
		action = op.Action
		s.actions.put(tenant, key, action)
	}
	return s.action(action)
}

// ExtendLeaseRequest is a heartbeat of the current lease holder.
type ExtendLeaseRequest struct {
	Caller
	Key     string
	Attempt int
	// LeaseSeconds of 0 means the policy's lease_seconds; more than it is an error.
	LeaseSeconds int
}

// ExtendLease extends the caller's live lease, bounded by the policy:
// lease_seconds from now, never beyond max_attempt_seconds after the
// attempt was claimed. It returns CodeStaleAttempt when the caller no
// longer holds the lease (an expired lease is never revived) and
// CodeInvalidState once max_attempt_seconds is reached.
func (s *Service) ExtendLease(ctx context.Context, req ExtendLeaseRequest) (*opjournal.Operation, error) {
	if err := firstError(checkKey(req.Key), checkAttempt(req.Attempt)); err != nil {
		return nil, err
	}
	act, err := s.actionOf(ctx, req.Tenant, req.Key)
	if err != nil {
		return nil, fmt.Errorf("extend lease %q: %w", req.Key, err)
	}
	lease := req.LeaseSeconds
	switch {
	case lease == 0:
		lease = act.LeaseSeconds
	case lease < 0 || lease > act.LeaseSeconds:
		return nil, opjournal.Errorf(opjournal.CodeInvalidArgument, "lease_seconds",
			"%d is outside 1..%d (the lease_seconds of %s's policy); 0 takes the policy's value", lease, act.LeaseSeconds, act.Name)
	}
	return s.applyOp(ctx, req.Caller, "", &protocol.Command{Kind: protocol.CmdExtendLease, Key: req.Key, Attempt: req.Attempt,
		LeaseSeconds: lease, Policy: protocol.CommandPolicy{MaxAttempt: act.MaxAttempt}})
}

// MarkSucceededRequest records a confirmed effect.
type MarkSucceededRequest struct {
	Caller
	Key        string
	Attempt    int
	ExternalID string
	Result     json.RawMessage // a JSON object, or nil for none
	// ResultCanonical says Result is already canonical JSON (from
	// canonjson.CanonicalizeStruct): it is then checked only for its
	// shape and size, not parsed again.
	ResultCanonical bool
	// ResultRefused, if not nil, is the transport's refusal of the result
	// while making it canonical (as RegisterRequest.PayloadRefused).
	ResultRefused error
	// Actor is who the caller says reports the effect (optional); it is
	// the history's actor only without authentication (default: the lease
	// owner).
	Actor string
}

// MarkSucceeded records a confirmed effect; see store.Store.MarkSucceeded.
func (s *Service) MarkSucceeded(ctx context.Context, req MarkSucceededRequest) (*opjournal.Operation, error) {
	if err := firstError(checkKey(req.Key), checkAttempt(req.Attempt), checkText("external_id", req.ExternalID, MaxExternalIDLen)); err != nil {
		return nil, err
	}
	if req.Actor != "" {
		if err := checkToken("actor", req.Actor, MaxWorkerIDLen); err != nil {
			return nil, err
		}
	}
	result, err := s.checkedResult(req.Result, req.ResultCanonical, req.ResultRefused)
	if err != nil {
		return nil, err
	}
	if result, err = s.redactResult(ctx, req.Tenant, req.Key, result); err != nil {
		return nil, fmt.Errorf("mark succeeded %q: %w", req.Key, err)
	}
	return s.applyOp(ctx, req.Caller, req.Actor, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: req.Key, Attempt: req.Attempt,
		ExternalID: req.ExternalID, Result: result})
}

// MarkRequest is the argument of MarkUnknown and MarkFailedFinal.
type MarkRequest struct {
	Caller
	Key       string
	Attempt   int
	ErrorCode string
	// Result (MarkFailedFinal only) is the refusal as the provider gave it,
	// a JSON object or nil; stored redacted, like a result.
	Result json.RawMessage
	// ResultCanonical and ResultRefused are as in MarkSucceededRequest.
	ResultCanonical bool
	ResultRefused   error
}

// MarkUnknown records an attempt without a definite answer. Only the
// current lease holder may; others get CodeStaleAttempt.
func (s *Service) MarkUnknown(ctx context.Context, req MarkRequest) (*opjournal.Operation, error) {
	return s.mark(ctx, protocol.CmdMarkUnknown, req)
}

// MarkFailedFinal records a confirmed rejection. Only the current lease
// holder may; others get CodeStaleAttempt.
func (s *Service) MarkFailedFinal(ctx context.Context, req MarkRequest) (*opjournal.Operation, error) {
	return s.mark(ctx, protocol.CmdMarkFailedFinal, req)
}

func (s *Service) mark(ctx context.Context, kind protocol.CommandKind, req MarkRequest) (*opjournal.Operation, error) {
	if err := firstError(checkKey(req.Key), checkAttempt(req.Attempt), checkText("error_code", req.ErrorCode, MaxErrorCodeLen)); err != nil {
		return nil, err
	}
	c := &protocol.Command{Kind: kind, Key: req.Key, Attempt: req.Attempt, ErrorCode: req.ErrorCode}
	if req.Result != nil || req.ResultRefused != nil {
		if kind != protocol.CmdMarkFailedFinal {
			return nil, opjournal.Errorf(opjournal.CodeInvalidArgument, "result", "only a confirmed refusal (MarkFailedFinal) or effect (MarkSucceeded) stores a result")
		}
		result, err := s.checkedResult(req.Result, req.ResultCanonical, req.ResultRefused)
		if err != nil {
			return nil, err
		}
		if c.Result, err = s.redactResult(ctx, req.Tenant, req.Key, result); err != nil {
			return nil, fmt.Errorf("%s %q: %w", store.Verb(kind), req.Key, err)
		}
	}
	return s.applyOp(ctx, req.Caller, "", c)
}

// Lookup returns an operation by key, or CodeNotFound.
func (s *Service) Lookup(ctx context.Context, tenant, key string) (*opjournal.Operation, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	op, err := s.store.Get(ctx, tenant, key)
	if err != nil {
		return nil, fmt.Errorf("lookup %q: %w", key, err)
	}
	return op, nil
}

// action returns the policy of name, or CodeUnknownAction.
func (s *Service) action(name string) (*policy.Action, error) {
	if name == "" {
		return nil, opjournal.Errorf(opjournal.CodeInvalidArgument, "action_type", "is required")
	}
	if len(name) > MaxActionLen {
		return nil, opjournal.Errorf(opjournal.CodeInvalidArgument, "action_type", "is %d bytes; the limit is %d", len(name), MaxActionLen)
	}
	act, ok := s.actionPolicy(name)
	if !ok {
		return nil, opjournal.Errorf(opjournal.CodeUnknownAction, "action_type",
			"%q has no policy on this server; defined actions: %v", name, s.policy.Names())
	}
	return act, nil
}

// claimPolicy sets the claim of c (Claim, or Register with a claim) from
// a caller's claim options, bounding the lease by the action's policy.
func claimPolicy(c *protocol.Command, act *policy.Action, workerID string, leaseSeconds int, prefix string) error {
	if err := checkToken(prefix+"worker_id", workerID, MaxWorkerIDLen); err != nil {
		return err
	}
	switch {
	case leaseSeconds == 0:
		leaseSeconds = act.LeaseSeconds
	case leaseSeconds < 0 || leaseSeconds > act.LeaseSeconds:
		return opjournal.Errorf(opjournal.CodeInvalidArgument, prefix+"lease_seconds",
			"%d is outside 1..%d (the lease_seconds of %s's policy); 0 takes the policy's value", leaseSeconds, act.LeaseSeconds, act.Name)
	}
	c.WorkerID, c.LeaseSeconds = workerID, leaseSeconds
	c.Policy.RetryAfterUnknown, c.Policy.ProviderWindow = act.AllowsRetryAfterUnknown(), act.ProviderDedupWindow
	return nil
}

// checkKey enforces 1–200 visible ASCII characters: keys travel in HTTP
// headers (Idempotency-Key) and URLs, where anything else is trouble.
func checkKey(key string) error {
	return checkToken("operation_key", key, MaxKeyLen)
}

func checkToken(field, v string, max int) error {
	if v == "" {
		return opjournal.Errorf(opjournal.CodeInvalidArgument, field, "is required")
	}
	if len(v) > max {
		return opjournal.Errorf(opjournal.CodeInvalidArgument, field, "is %d characters; the limit is %d", len(v), max)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x21 || v[i] > 0x7e {
			return opjournal.Errorf(opjournal.CodeInvalidArgument, field,
				"has a byte 0x%02x at offset %d; only visible ASCII characters (0x21–0x7e) are allowed", v[i], i)
		}
	}
	return nil
}

// checkText bounds an optional free-text field and keeps control
// characters (log injection) out of it.
func checkText(field, v string, max int) error {
	if len(v) > max {
		return opjournal.Errorf(opjournal.CodeInvalidArgument, field, "is %d bytes; the limit is %d", len(v), max)
	}
	if !utf8.ValidString(v) {
		return opjournal.Errorf(opjournal.CodeInvalidArgument, field, "is not valid UTF-8")
	}
	for i, r := range v {
		if r < 0x20 || r == 0x7f {
			return opjournal.Errorf(opjournal.CodeInvalidArgument, field, "has a control character at offset %d", i)
		}
	}
	return nil
}

func checkAttempt(a int) error {
	if a < 1 {
		return opjournal.Errorf(opjournal.CodeInvalidArgument, "attempt", "must be ≥ 1 (the attempt number Claim returned)")
	}
	return nil
}

// checkedResult is canonicalResult for a result that a transport may
// have canonicalised already (canonical true: from
// canonjson.CanonicalizeStruct), which is only checked to be an object
// within Limits.MaxResultBytes, with canonicalResult's errors, or refused
// (refused not nil: reported as canonicalResult reports a bad value).
func (s *Service) checkedResult(raw json.RawMessage, canonical bool, refused error) (json.RawMessage, error) {
	if refused != nil {
		return nil, JSONError("result", refused)
	}
	if !canonical || raw == nil {
		return s.canonicalResult(raw)
	}
	if raw[0] != '{' {
		return nil, opjournal.Errorf(opjournal.CodeInvalidArgument, "result", "must be a JSON object")
	}
	if len(raw) > s.limits.MaxResultBytes {
		return nil, opjournal.Errorf(opjournal.CodeTooLarge, "result", "is %d bytes as canonical JSON; the limit is %d", len(raw), s.limits.MaxResultBytes)
	}
	return raw, nil
}

// jsonError names the offending JSON value in the field ("payload/amount_minor").
func JSONError(field string, err error) error {
	if ce, ok := err.(*canonjson.Error); ok {
		return &opjournal.Error{Code: opjournal.CodeInvalidArgument, Field: field + ce.Path, Message: ce.Msg, Err: err}
	}
	return &opjournal.Error{Code: opjournal.CodeInvalidArgument, Field: field, Message: err.Error(), Err: err}
}

// RetryAfterSeconds rounds a retry-after hint up to whole seconds (≥ 1 when
// positive), the unit clients sleep in.
func RetryAfterSeconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int((d + time.Second - 1) / time.Second)
}
