package console

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/protocol/policy"
)

func TestAmountOfShowsTheAmountLikeMembersOnly(t *testing.T) {
	act := &policy.Action{RedactFields: []string{"card_number", "secret_amount"}}
	for _, c := range []struct {
		payload string
		want    []member
	}{
		{`{"amount_minor": 4900, "currency": "EUR", "card_number": "[redacted]", "order_id": "o-1"}`,
			[]member{{"amount_minor", "4900"}, {"currency", "EUR"}}},
		// Name order, then currency; nested and null members are not shown.
		{`{"currency": "USD", "tip_amount": 100, "amount": "12.50", "amount_detail": {"x": 1}, "amount_tax": null}`,
			[]member{{"amount", "12.50"}, {"tip_amount", "100"}, {"currency", "USD"}}},
		// A member the policy redacts stays redacted, whatever it holds.
		{`{"secret_amount": 7}`, []member{{"secret_amount", "[redacted]"}}},
		{`{"order_id": "o-1"}`, nil},
		{``, nil},
		{`not json`, nil},
		{`{"amount": "` + strings.Repeat("9", 60) + `"}`, []member{{"amount", strings.Repeat("9", 39) + "…"}}},
	} {
		if got := amountOf(json.RawMessage(c.payload), act); !reflect.DeepEqual(got, c.want) {
			t.Errorf("amountOf(%s) = %v, want %v", c.payload, got, c.want)
		}
	}
}

func TestOldestFirstOrdersByCreationThenKey(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	rows := []approvalRow{
		{Op: &opjournal.Operation{Key: "c", CreatedAt: t0.Add(time.Hour)}},
		{Op: &opjournal.Operation{Key: "b", CreatedAt: t0}},
		{Op: &opjournal.Operation{Key: "a", CreatedAt: t0}},
		{Op: &opjournal.Operation{Key: "d", CreatedAt: t0.Add(-time.Minute)}},
	}
	oldestFirst(rows)
	var keys []string
	for _, r := range rows {
		keys = append(keys, r.Op.Key)
	}
	if strings.Join(keys, " ") != "d a b c" {
		t.Fatalf("order %v, want d a b c", keys)
	}
}

func TestPickedOfReadsKeyAndHash(t *testing.T) {
	got, err := pickedOf([]string{"pay-1 h1", "pay-2 h2", "pay-1 h1"})
	if err != nil || !reflect.DeepEqual(got, []picked{{"pay-1", "h1"}, {"pay-2", "h2"}}) {
		t.Fatalf("pickedOf = %v, %v", got, err)
	}
	many := make([]string, maxBulkReject+1)
	for i := range many {
		many[i] = "k h"
	}
	for name, in := range map[string][]string{
		"none": nil, "no hash": {"pay-1"}, "empty hash": {"pay-1 "}, "two spaces": {"pay-1 h 2"},
		"huge hash": {"pay-1 " + strings.Repeat("a", maxHashLen+1)}, "too many": many,
	} {
		if _, err := pickedOf(in); opjournal.ErrorCode(err) != opjournal.CodeInvalidArgument {
			t.Errorf("%s: %v, want INVALID_ARGUMENT", name, err)
		}
	}
}

func TestApprovalProgressAndNotes(t *testing.T) {
	one := approvalState{DistinctFromRequester: true, RequestedBy: "alice"}
	two := approvalState{TwoPerson: true, Given: []givenApproval{{Principal: "bob"}}}
	if one.Progress() != "0 of 1" || two.Progress() != "1 of 2" {
		t.Fatalf("progress %q %q", one.Progress(), two.Progress())
	}
	// The notes compare principal ids, never labels: alice signed in with
	// another of her tokens is still alice.
	asked := &opjournal.Operation{Approval: &opjournal.Approval{DistinctFromRequester: true, RequestedBy: "alice", RequestedByLabel: "alice-laptop"}}
	approved := &opjournal.Operation{Approval: &opjournal.Approval{TwoPerson: true, Approvals: []opjournal.ApprovalDecision{{Principal: "bob", Label: "bob-laptop"}}}}
	caller := func(id, label string) journal.Caller { return journal.Caller{Principal: id, Label: label} }
	if requesterNote(asked, caller("alice", "alice-phone")) == "" || requesterNote(asked, caller("bob", "alice-laptop")) != "" {
		t.Fatal("the requester is not warned, or another person (with her token's label) is")
	}
	if requesterNote(approved, caller("bob", "bob-phone")) == "" || requesterNote(approved, caller("carol", "bob-laptop")) != "" {
		t.Fatal("a second approval by the same person is not warned, or another person is")
	}
}

func TestApprovalConsequenceNamesActionAndHash(t *testing.T) {
	op := &opjournal.Operation{Action: "create_payment", RequestHash: "abc123", Status: statusAwaitingApproval}
	approve := approvalConsequence(decision{Verdict: verdictApprove}, op)
	if !strings.Contains(approve, "Approving lets the agent call create_payment with exactly this payload (hash abc123) once") {
		t.Fatalf("approve: %s", approve)
	}
	reject := approvalConsequence(decision{Verdict: verdictReject}, op)
	if !strings.Contains(reject, "failed_final (error code approval_rejected)") || !strings.Contains(reject, "the agent's retries get this refusal") {
		t.Fatalf("reject: %s", reject)
	}
	if got := approvalPreflight(decision{Verdict: verdictApprove, RequestHash: "other"}, op); !strings.Contains(got, "PAYLOAD_MISMATCH") {
		t.Fatalf("another hash: %q", got)
	}
	done := &opjournal.Operation{Status: opjournal.StatusPending, RequestHash: "abc123"}
	if got := approvalPreflight(decision{Verdict: verdictReject, RequestHash: "abc123"}, done); !strings.Contains(got, "no longer awaiting approval") {
		t.Fatalf("not awaiting: %q", got)
	}
}
