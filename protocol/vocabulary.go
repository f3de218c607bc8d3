package protocol

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/opjournal/opjournal"
)

// The vocabularies of the table, one row each: a field's column and how
// Apply reads and writes it; a parameter's name, and how its value is
// taken from a command (its type is the accessor it has). Adding a field
// or a parameter is adding its constant and its row here; nothing else
// switches over them.

// fieldDef is one field of an operation.
type fieldDef struct {
	column string
	// get returns op's value: a Status, int, string, bool, time.Time
	// (zero for NULL), json.RawMessage or []string.
	get func(op *opjournal.Operation) any
	// set assigns v (nil for NULL); nil for the fields only Register
	// writes (Apply copies them from the command).
	set func(op *opjournal.Operation, v any)
}

var fields = [...]fieldDef{
	FieldStatus: {"status", func(op *opjournal.Operation) any { return op.Raw() }, func(op *opjournal.Operation, v any) {
		switch s := v.(type) {
		case opjournal.Status:
			op.Status = s
		case string:
			op.Status = opjournal.Status(s)
		}
	}},
	FieldAttemptCount: {"attempt_count", func(op *opjournal.Operation) any { return op.AttemptCount },
		func(op *opjournal.Operation, v any) { op.AttemptCount = asInt(v) }},
	FieldLeaseOwner: {"lease_owner", func(op *opjournal.Operation) any { return op.LeaseOwner },
		func(op *opjournal.Operation, v any) { op.LeaseOwner = asString(v) }},
	FieldLeaseUntil: {"lease_until", func(op *opjournal.Operation) any { return op.LeaseUntil },
		func(op *opjournal.Operation, v any) { op.LeaseUntil = asTime(v) }},
	FieldExternalID: {"external_id", func(op *opjournal.Operation) any { return op.ExternalID },
		func(op *opjournal.Operation, v any) { op.ExternalID = asString(v) }},
	FieldResult: {"result", func(op *opjournal.Operation) any { return op.Result },
		func(op *opjournal.Operation, v any) { op.Result, _ = v.(json.RawMessage) }},
	FieldErrorCode: {"error_code", func(op *opjournal.Operation) any { return op.ErrorCode },
		func(op *opjournal.Operation, v any) { op.ErrorCode = asString(v) }},
	FieldNeedsReview: {"needs_review", func(op *opjournal.Operation) any { return op.NeedsReview },
		func(op *opjournal.Operation, v any) { op.NeedsReview, _ = v.(bool) }},
	FieldReviewReason: {"review_reason", func(op *opjournal.Operation) any { return op.ReviewReason },
		func(op *opjournal.Operation, v any) { op.ReviewReason = asString(v) }},
	FieldUnknownSince: {"unknown_since", func(op *opjournal.Operation) any { return op.UnknownSince },
		func(op *opjournal.Operation, v any) { op.UnknownSince = asTime(v) }},
	FieldCheckCount: {"check_count", func(op *opjournal.Operation) any { return op.CheckCount },
		func(op *opjournal.Operation, v any) { op.CheckCount = asInt(v) }},
	FieldLastCheckedAt: {"last_checked_at", func(op *opjournal.Operation) any { return op.LastCheckedAt },
		func(op *opjournal.Operation, v any) { op.LastCheckedAt = asTime(v) }},
	FieldNextCheckAt: {"next_check_at", func(op *opjournal.Operation) any { return op.NextCheckAt },
		func(op *opjournal.Operation, v any) { op.NextCheckAt = asTime(v) }},
	FieldAttemptStartedAt: {"attempt_started_at", func(op *opjournal.Operation) any { return op.AttemptStartedAt },
		func(op *opjournal.Operation, v any) { op.AttemptStartedAt = asTime(v) }},
	FieldDuplicateExternalIDs: {"duplicate_external_ids", func(op *opjournal.Operation) any { return op.DuplicateExternalIDs },
		func(op *opjournal.Operation, v any) {
			ids, _ := v.([]string)
			op.DuplicateExternalIDs = ids
			op.DuplicateExternalID = ""
			if len(ids) > 0 {
				op.DuplicateExternalID = ids[0]
			}
		}},
	FieldDuplicateReports: {"duplicate_reports", func(op *opjournal.Operation) any { return op.DuplicateReports },
		func(op *opjournal.Operation, v any) { op.DuplicateReports = asInt(v) }},
	FieldFirstAttemptAt: {"first_attempt_at", func(op *opjournal.Operation) any { return op.FirstAttemptAt },
		func(op *opjournal.Operation, v any) { op.FirstAttemptAt = asTime(v) }},
	FieldNote: {"note", func(op *opjournal.Operation) any { return op.Note },
		func(op *opjournal.Operation, v any) { op.Note = asString(v) }},
	FieldApproval: {"approval", func(op *opjournal.Operation) any { return opjournal.ApprovalJSON(op.Approval) },
		func(op *opjournal.Operation, v any) {
			// The deadline has its own column (FieldApprovalDeadline), so
			// it survives a new value of the rest.
			var deadline time.Time
			if op.Approval != nil {
				deadline = op.Approval.Deadline
			}
			raw, _ := v.(json.RawMessage)
			a, err := opjournal.ParseApproval(raw, deadline)
			if err != nil {
				panic("protocol: approval: " + err.Error()) // written by ApprovalJSON or ExprAppendApproval
			}
			op.Approval = a
		}},
	FieldApprovalDeadline: {"approval_deadline", func(op *opjournal.Operation) any {
		if op.Approval == nil {
			return time.Time{}
		}
		return op.Approval.Deadline
	}, func(op *opjournal.Operation, v any) {
		if op.Approval != nil { // set after FieldApproval (table.go lists it first)
			op.Approval.Deadline = asTime(v)
		}
	}},
	FieldAction:      {column: "action_type"},
	FieldRequestHash: {column: "request_hash"},
	FieldHashKeyID:   {column: "hash_key_id"},
	FieldPayload:     {column: "payload"},
	FieldRefs:        {column: "refs"},
	FieldParentKey:   {column: "parent_key"},
	FieldBudgets:     {column: "budgets"},
}

func (f Field) def() *fieldDef {
	if f <= 0 || int(f) >= len(fields) || fields[f].column == "" {
		return nil
	}
	return &fields[f]
}

// Column is the field's column name in every store.
func (f Field) Column() string {
	if d := f.def(); d != nil {
		return d.column
	}
	return fmt.Sprintf("field(%d)", int(f))
}

// getField returns op's value of f.
func getField(op *opjournal.Operation, f Field) any {
	if d := f.def(); d != nil && d.get != nil {
		return d.get(op)
	}
	panic(fmt.Sprintf("protocol: no value of %s", f.Column()))
}

// setField assigns v (nil for NULL) to op's field f.
func setField(op *opjournal.Operation, f Field, v any) {
	if d := f.def(); d != nil && d.set != nil {
		d.set(op, v)
		return
	}
	panic(fmt.Sprintf("protocol: %s is not set by rules", f.Column()))
}

// paramDef is one parameter: its name and the one accessor of its type.
type paramDef struct {
	name string
	// text is a text parameter of c under rule r (op is the row as read,
	// nil on a store's one-statement path; see EventSpec.Reason).
	text     func(c *Command, r *Rule, op *opjournal.Operation) string
	int      func(c *Command) int
	bool     func(c *Command) bool
	duration func(c *Command) time.Duration
	json     func(c *Command) json.RawMessage // nil is NULL
}

var params = [...]paramDef{
	ParamWorkerID:     {name: "worker_id", text: func(c *Command, _ *Rule, _ *opjournal.Operation) string { return c.WorkerID }},
	ParamLeaseSeconds: {name: "lease_seconds", int: func(c *Command) int { return c.LeaseSeconds }},
	ParamAttempt:      {name: "attempt", int: func(c *Command) int { return c.Attempt }},
	ParamExternalID:   {name: "external_id", text: func(c *Command, _ *Rule, _ *opjournal.Operation) string { return c.ExternalID }},
	ParamResult:       {name: "result", json: func(c *Command) json.RawMessage { return c.Result }},
	ParamErrorCode:    {name: "error_code", text: func(c *Command, _ *Rule, _ *opjournal.Operation) string { return c.ErrorCode }},
	ParamActor:        {name: "actor", text: func(c *Command, _ *Rule, _ *opjournal.Operation) string { return c.Actor }},
	ParamStatedActor:  {name: "stated_actor", text: func(c *Command, _ *Rule, _ *opjournal.Operation) string { return c.StatedActor }},
	ParamActorLabel:   {name: "actor_label", text: func(c *Command, _ *Rule, _ *opjournal.Operation) string { return c.ActorLabel }},
	ParamEventReason: {name: "event_reason", text: func(c *Command, r *Rule, op *opjournal.Operation) string {
		if r.Event == nil {
			return ""
		}
		return r.Event.Reason(op, c)
	}},
	ParamReviewReason: {name: "review_reason", text: func(c *Command, r *Rule, op *opjournal.Operation) string {
		if r.ReviewReason == nil {
			return ""
		}
		return r.ReviewReason(op, c)
	}},
	ParamNextCheckAfter:    {name: "next_check_after", duration: func(c *Command) time.Duration { return c.NextCheckAfter }},
	ParamRetryAfterUnknown: {name: "retry_after_unknown", bool: func(c *Command) bool { return c.Policy.RetryAfterUnknown }},
	ParamDefinitiveAbsence: {name: "definitive_absence", bool: func(c *Command) bool { return c.Policy.DefinitiveAbsence }},
	ParamReleaseAfter:      {name: "release_after", duration: func(c *Command) time.Duration { return c.Policy.ReleaseAfter }},
	ParamMaxAttempt:        {name: "max_attempt", duration: func(c *Command) time.Duration { return c.Policy.MaxAttempt }},
	ParamResolution: {name: "resolution", text: func(c *Command, _ *Rule, _ *opjournal.Operation) string {
		return string(c.Resolution)
	}},
	ParamAction:           {name: "action_type", text: func(c *Command, _ *Rule, _ *opjournal.Operation) string { return c.Action }},
	ParamRequestHash:      {name: "request_hash", text: func(c *Command, _ *Rule, _ *opjournal.Operation) string { return c.RequestHash }},
	ParamHashKeyID:        {name: "hash_key_id", text: func(c *Command, _ *Rule, _ *opjournal.Operation) string { return c.HashKeyID }},
	ParamPayload:          {name: "payload", json: func(c *Command) json.RawMessage { return c.Payload }},
	ParamClaim:            {name: "claim", bool: func(c *Command) bool { return c.Claim }},
	ParamRefs:             {name: "refs", json: func(c *Command) json.RawMessage { return opjournal.RefsJSON(c.Refs) }},
	ParamParentKey:        {name: "parent_key", text: func(c *Command, _ *Rule, _ *opjournal.Operation) string { return c.ParentKey }},
	ParamProviderWindow:   {name: "provider_dedup_window", duration: func(c *Command) time.Duration { return c.Policy.ProviderWindow }},
	ParamNote:             {name: "note", text: func(c *Command, _ *Rule, _ *opjournal.Operation) string { return c.Note }},
	ParamApprovalRequired: {name: "approval_required", bool: func(c *Command) bool { return c.Approval != nil }},
	ParamApproval:         {name: "approval", json: func(c *Command) json.RawMessage { return opjournal.ApprovalJSON(c.approval()) }},
	ParamApprovalTimeout:  {name: "approval_timeout", duration: func(c *Command) time.Duration { return c.approvalTimeout() }},
	ParamReason:           {name: "reason", text: func(c *Command, _ *Rule, _ *opjournal.Operation) string { return c.Reason }},
	ParamBudgetRefused:    {name: "budget_refused", bool: func(c *Command) bool { return c.BudgetVerdict.Refused != nil }},
	ParamBudgetApproval:   {name: "budget_approval", bool: func(c *Command) bool { return len(c.BudgetVerdict.AskApproval) > 0 }},
	ParamBudgets:          {name: "budgets", json: func(c *Command) json.RawMessage { return opjournal.BudgetsJSON(c.BudgetVerdict.Holds) }},
}

func (p Param) def() *paramDef {
	if p <= 0 || int(p) >= len(params) || params[p].name == "" {
		panic(fmt.Sprintf("protocol: no parameter %d", int(p)))
	}
	return &params[p]
}

// Name is the parameter's name in generated SQL and in the docs.
func (p Param) Name() string {
	if p <= 0 || int(p) >= len(params) || params[p].name == "" {
		return fmt.Sprintf("param(%d)", int(p))
	}
	return params[p].name
}

// Type is the type of the parameter's value: the accessor its row has.
func (p Param) Type() ParamType {
	d := p.def()
	switch {
	case d.int != nil:
		return TypeInt
	case d.bool != nil:
		return TypeBool
	case d.duration != nil:
		return TypeDuration
	case d.json != nil:
		return TypeJSON
	}
	return TypeText
}

// Value returns the parameter's value for command c under rule r; op is
// the row as read (nil on a store's one-statement path, see EventSpec).
// Its type is the parameter's (Param.Type); the typed accessors (Text,
// Int, Bool, Duration, JSON) give the same values without boxing them.
func (c *Command) Value(p Param, r *Rule, op *opjournal.Operation) any {
	switch d := p.def(); {
	case d.int != nil:
		return d.int(c)
	case d.bool != nil:
		return d.bool(c)
	case d.duration != nil:
		return d.duration(c)
	case d.json != nil:
		return d.json(c)
	}
	return c.Text(p, r, op)
}

// Text returns a text parameter (TypeText) of c under rule r.
func (c *Command) Text(p Param, r *Rule, op *opjournal.Operation) string {
	if d := p.def(); d.text != nil {
		return d.text(c, r, op)
	}
	panic(fmt.Sprintf("protocol: %s is not a text parameter", p.Name()))
}

// Int returns an integer parameter (TypeInt) of c.
func (c *Command) Int(p Param) int {
	if d := p.def(); d.int != nil {
		return d.int(c)
	}
	panic(fmt.Sprintf("protocol: %s is not an integer parameter", p.Name()))
}

// Bool returns a boolean parameter (TypeBool) of c.
func (c *Command) Bool(p Param) bool {
	if d := p.def(); d.bool != nil {
		return d.bool(c)
	}
	panic(fmt.Sprintf("protocol: %s is not a boolean parameter", p.Name()))
}

// Duration returns a duration parameter (TypeDuration) of c.
func (c *Command) Duration(p Param) time.Duration {
	if d := p.def(); d.duration != nil {
		return d.duration(c)
	}
	panic(fmt.Sprintf("protocol: %s is not a duration parameter", p.Name()))
}

// JSON returns a JSON parameter (TypeJSON) of c; nil is NULL.
func (c *Command) JSON(p Param) json.RawMessage {
	if d := p.def(); d.json != nil {
		return d.json(c)
	}
	panic(fmt.Sprintf("protocol: %s is not a JSON parameter", p.Name()))
}
