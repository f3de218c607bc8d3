package ops_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/internal/ops"
	"github.com/opjournal/opjournal/internal/testkit/testserver"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol/policy"
)

// escalated makes an unknown, escalated payment for key.
func escalated(t *testing.T, c pb.JournalServiceClient, key string) {
	t.Helper()
	ctx := context.Background()
	payload, _ := structpb.NewStruct(map[string]any{"order_id": "1", "amount_minor": 100, "currency": "EUR"})
	if _, err := c.Register(ctx, &pb.RegisterRequest{OperationKey: key, ActionType: "create_payment", Payload: payload, Claim: &pb.ClaimOptions{WorkerId: "agent-1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.MarkUnknown(ctx, &pb.MarkUnknownRequest{OperationKey: key, Attempt: 1, ErrorCode: "timeout"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Escalate(ctx, &pb.EscalateRequest{OperationKey: key, Actor: "reconciler-1", Reason: "verifier cannot answer"}); err != nil {
		t.Fatal(err)
	}
}

func run(t *testing.T, c pb.JournalServiceClient, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := ops.Run(context.Background(), c, args, &out)
	return out.String(), err
}

func TestReviewQueueShowResolve(t *testing.T) {
	t.Parallel()
	j := testserver.Start(t, nil)
	escalated(t, j.Client, "payment:order-1:intent-01")
	escalated(t, j.Client, "payment:order-2:intent-01")
	payload, _ := structpb.NewStruct(map[string]any{"to": "a@example.com"})
	if _, err := j.Client.Register(context.Background(), &pb.RegisterRequest{OperationKey: "email:1", ActionType: "send_email", Payload: payload}); err != nil {
		t.Fatal(err)
	}

	out, err := run(t, j.Client, "list")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "payment:order-1:intent-01") || !strings.Contains(out, "payment:order-2:intent-01") ||
		strings.Contains(out, "email:1") || !strings.Contains(out, "verifier cannot answer") {
		t.Fatalf("review queue:\n%s", out)
	}
	if out, _ := run(t, j.Client, "list", "--all", "--json"); strings.Count(out, "\n") != 3 {
		t.Fatalf("list --all --json: want 3 lines:\n%s", out)
	}

	out, err = run(t, j.Client, "show", "payment:order-1:intent-01")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"status", "unknown", "needs_review", "history:", "registered and claimed", "outcome unknown: timeout", "escalated: verifier cannot answer"} {
		if !strings.Contains(out, want) {
			t.Fatalf("show lacks %q:\n%s", want, out)
		}
	}

	if _, err := run(t, j.Client, "resolve", "payment:order-1:intent-01", "--succeeded", "--external-id", "pay_42", "--actor", "alice", "--reason", "seen in the provider's dashboard"); err != nil {
		t.Fatal(err)
	}
	op, err := j.Client.Lookup(context.Background(), &pb.LookupRequest{OperationKey: "payment:order-1:intent-01"})
	if err != nil {
		t.Fatal(err)
	}
	if o := op.GetOperation(); o.GetStatus() != pb.Status_STATUS_SUCCEEDED || o.GetExternalId() != "pay_42" || o.GetNeedsReview() {
		t.Fatalf("after resolve: %v", o)
	}
	evs, _ := j.Client.ListEvents(context.Background(), &pb.ListEventsRequest{OperationKey: "payment:order-1:intent-01"})
	last := evs.GetEvents()[len(evs.GetEvents())-1]
	if last.GetActor() != "alice" || !strings.Contains(last.GetReason(), "dashboard") || last.GetToStatus() != pb.Status_STATUS_SUCCEEDED {
		t.Fatalf("resolve not audited: %v", last)
	}
	// The queue now holds only order 2.
	if out, _ := run(t, j.Client, "list"); strings.Contains(out, "order-1") || !strings.Contains(out, "order-2") {
		t.Fatalf("queue after resolve:\n%s", out)
	}
	if _, err := run(t, j.Client, "resolve", "payment:order-2:intent-01", "--failed-final", "--error-code", "declined", "--actor", "bob", "--reason", "provider confirms decline"); err != nil {
		t.Fatal(err)
	}
	if out, _ := run(t, j.Client, "list"); !strings.Contains(out, "no operations") {
		t.Fatalf("queue not empty:\n%s", out)
	}
}

// TestOutputFormats: -o json prints one JSON object per operation (show:
// the operation, then one per event), as --json does; -o table the
// columns.
func TestOutputFormats(t *testing.T) {
	t.Parallel()
	j := testserver.Start(t, nil)
	escalated(t, j.Client, "payment:order-1:intent-01")
	escalated(t, j.Client, "payment:order-2:intent-01")
	for _, args := range [][]string{{"list", "-o", "json"}, {"list", "--output=json"}, {"list", "--json"}, {"list", "--json", "-o", "json"}} {
		out, err := run(t, j.Client, args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 {
			t.Fatalf("%v: want 2 lines:\n%s", args, out)
		}
		for i, line := range lines {
			var op map[string]any
			if err := json.Unmarshal([]byte(line), &op); err != nil || op["operation_key"] != fmt.Sprintf("payment:order-%d:intent-01", i+1) {
				t.Fatalf("%v: line %d is not the operation: %v\n%s", args, i, err, line)
			}
		}
	}
	out, err := run(t, j.Client, "list", "-o", "table")
	if err != nil || !strings.HasPrefix(out, "KEY") || !strings.Contains(out, "payment:order-2:intent-01") {
		t.Fatalf("list -o table: %v\n%s", err, out)
	}
	out, err = run(t, j.Client, "show", "-o", "json", "payment:order-1:intent-01")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// The record, then registered and claimed, outcome unknown, escalated.
	if len(lines) != 4 || !strings.Contains(lines[0], `"operation_key":"payment:order-1:intent-01"`) {
		t.Fatalf("show -o json:\n%s", out)
	}
	for _, line := range lines {
		if !json.Valid([]byte(line)) {
			t.Fatalf("show -o json: not JSON: %s", line)
		}
	}
}

func TestBadCommandLinesChangeNothing(t *testing.T) {
	t.Parallel()
	j := testserver.Start(t, nil)
	escalated(t, j.Client, "k")
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"show"},
		{"resolve", "k", "--succeeded", "--failed-final", "--actor", "a", "--reason", "r"},
		{"resolve", "k", "--succeeded", "--external-id", "x"}, // no actor/reason
		{"release", "k", "--actor", "a"},
		{"list", "--status", "bogus"},
		{"list", "--limit", "0"},
		{"list", "-o", "yaml"},
		{"list", "--json", "-o", "table"},
		{"show", "k", "--output", "xml"},
	} {
		if _, err := run(t, j.Client, args...); !errors.Is(err, ops.ErrUsage) {
			t.Errorf("%v: got %v, want a usage error", args, err)
		}
	}
	// Refused by the server: a succeeded resolution without an external id.
	_, err := run(t, j.Client, "resolve", "k", "--succeeded", "--actor", "a", "--reason", "r")
	if client.CodeOf(err) != "INVALID_ARGUMENT" {
		t.Fatalf("resolve without external id: %v", err)
	}
	// Refused by the policy: the lag has not passed / the op is under review.
	_, err = run(t, j.Client, "release", "k", "--actor", "a", "--reason", "r")
	if client.CodeOf(err) != "INVALID_STATE" {
		t.Fatalf("release of an escalated op: %v", err)
	}
	op, _ := j.Client.Lookup(context.Background(), &pb.LookupRequest{OperationKey: "k"})
	if op.GetOperation().GetStatus() != pb.Status_STATUS_UNKNOWN || !op.GetOperation().GetNeedsReview() {
		t.Fatalf("a refused command changed the operation: %v", op.GetOperation())
	}
}

// TestAcknowledgeADuplicate: a terminal operation under review is never
// resolved again (its status stays); acknowledge ends its review, and the
// history says who and why.
func TestAcknowledgeADuplicate(t *testing.T) {
	t.Parallel()
	j := testserver.Start(t, nil)
	ctx := context.Background()
	payload, _ := structpb.NewStruct(map[string]any{"to": "a@example.com"})
	r, err := j.Client.Register(ctx, &pb.RegisterRequest{OperationKey: "email:dup", ActionType: "send_email", Payload: payload, Claim: &pb.ClaimOptions{WorkerId: "w"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ext := range []string{"eml_1", "eml_2"} {
		if _, err := j.Client.MarkSucceeded(ctx, &pb.MarkSucceededRequest{OperationKey: "email:dup", Attempt: r.GetAttempt(), ExternalId: ext}); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := run(t, j.Client, "show", "email:dup"); err != nil || !strings.Contains(out, "eml_2 (1 reports of other effects)") {
		t.Fatalf("show: %v\n%s", err, out)
	}
	_, err = run(t, j.Client, "resolve", "email:dup", "--failed-final", "--actor", "alice", "--reason", "no")
	if client.CodeOf(err) != "INVALID_STATE" || !strings.Contains(err.Error(), "acknowledge") {
		t.Fatalf("resolve of a succeeded operation: %v", err)
	}
	out, err := run(t, j.Client, "acknowledge", "email:dup", "--actor", "alice", "--reason", "the second send was a provider retry")
	if err != nil || !strings.Contains(out, "still succeeded") {
		t.Fatalf("acknowledge: %v\n%s", err, out)
	}
	op, err := j.Client.Lookup(ctx, &pb.LookupRequest{OperationKey: "email:dup"})
	if err != nil || op.GetOperation().GetNeedsReview() || op.GetOperation().GetStatus() != pb.Status_STATUS_SUCCEEDED || op.GetOperation().GetExternalId() != "eml_1" {
		t.Fatalf("after acknowledge: %v %v", op, err)
	}
	if _, err := run(t, j.Client, "acknowledge", "email:dup"); !errors.Is(err, ops.ErrUsage) {
		t.Fatalf("acknowledge without a reason: %v", err)
	}
}

// TestListByRefsAndParent: an operator finds an order's operations by a
// business reference, and a payment's side effects by their parent; show
// prints both.
func TestListByRefsAndParent(t *testing.T) {
	t.Parallel()
	j := testserver.Start(t, nil)
	ctx := context.Background()
	pay, _ := structpb.NewStruct(map[string]any{"order_id": "817", "amount_minor": 100, "currency": "EUR"})
	mail, _ := structpb.NewStruct(map[string]any{"to": "a@example.com"})
	for _, r := range []*pb.RegisterRequest{
		{OperationKey: "op_pay817", ActionType: "create_payment", Payload: pay, Refs: map[string]string{"order_id": "817", "customer": "c-93"}},
		{OperationKey: "op_pay900", ActionType: "create_payment", Payload: pay, Refs: map[string]string{"order_id": "900", "customer": "c-93"}},
		{OperationKey: "op_receipt817", ActionType: "send_email", Payload: mail, ParentKey: "op_pay817", Refs: map[string]string{"order_id": "817"}},
	} {
		if _, err := j.Client.Register(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	keys := func(args ...string) string {
		t.Helper()
		out, err := run(t, j.Client, append([]string{"list"}, args...)...)
		if err != nil {
			t.Fatalf("list %v: %v", args, err)
		}
		var ks []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			ks = append(ks, strings.Fields(line)[0])
		}
		return strings.Join(ks, ",")
	}
	if got := keys("--ref", "order_id=817"); got != "op_pay817,op_receipt817" {
		t.Errorf("--ref order_id=817: %s", got)
	}
	if got := keys("--ref", "order_id=817", "--ref", "customer=c-93"); got != "op_pay817" {
		t.Errorf("two refs: %s", got)
	}
	if got := keys("--parent", "op_pay817"); got != "op_receipt817" {
		t.Errorf("--parent: %s", got)
	}
	if out, _ := run(t, j.Client, "list", "--ref", "order_id=1"); !strings.Contains(out, "no operations") {
		t.Errorf("no match: %s", out)
	}
	for _, bad := range [][]string{{"list", "--ref", "order_id"}, {"list", "--ref", "a=1", "--ref", "a=2"}} {
		if _, err := run(t, j.Client, bad...); !errors.Is(err, ops.ErrUsage) {
			t.Errorf("%v: %v, want a usage error", bad, err)
		}
	}
	out, err := run(t, j.Client, "show", "op_receipt817")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"refs", "order_id=817", "parent_key", "op_pay817"} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
}

// TestListIsInKeyOrderAsItsHelpSays: list prints the operations in key
// order, not by their last change, and its help says so.
func TestListIsInKeyOrderAsItsHelpSays(t *testing.T) {
	t.Parallel()
	j := testserver.Start(t, nil)
	// Registered b, c, a; then b changes last: neither the registration
	// nor the change order is the key order.
	for _, key := range []string{"payment:order-b:intent-01", "payment:order-c:intent-01", "payment:order-a:intent-01"} {
		escalated(t, j.Client, key)
	}
	if _, err := j.Client.RecordCheck(context.Background(), &pb.RecordCheckRequest{OperationKey: "payment:order-b:intent-01", Attempt: 1, Actor: "rec", Note: "still inconclusive", NextCheckAfterSeconds: 60}); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, j.Client, "list", "--all")
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := strings.Index(out, "order-a"), strings.Index(out, "order-b"), strings.Index(out, "order-c")
	if a < 0 || !(a < b && b < c) {
		t.Fatalf("list --all is not in key order:\n%s", out)
	}
	cmd := ops.NewCommand(nil)
	list, _, err := cmd.Find([]string{"list"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(list.Long, "operation-key order") || strings.Contains(list.Long, "newest") {
		t.Fatalf("list's help does not say the order it lists in:\n%s", list.Long)
	}
}

// TestNoteShowsInShow: an operator's note on a terminal operation is
// printed by show, line by line, and its event is in the history; an empty
// note clears it; a note the server refuses (a control character) changes
// nothing.
func TestNoteShowsInShow(t *testing.T) {
	t.Parallel()
	j := testserver.Start(t, nil)
	ctx := context.Background()
	escalated(t, j.Client, "k")
	if _, err := run(t, j.Client, "resolve", "k", "--failed-final", "--actor", "alice", "--reason", "declined"); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, j.Client, "note", "k", "refund asked\nticket 4711", "--actor", "alice")
	if err != nil || !strings.Contains(out, "k noted") {
		t.Fatalf("note: %v\n%s", err, out)
	}
	out, err = run(t, j.Client, "show", "k")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"note:\n  refund asked\n  ticket 4711\n", "failed_final  failed_final", "alice"} {
		if !strings.Contains(out, want) {
			t.Fatalf("show lacks %q:\n%s", want, out)
		}
	}
	if _, err := run(t, j.Client, "note", "k", "bell\a", "--actor", "alice"); client.CodeOf(err) != "INVALID_ARGUMENT" {
		t.Fatalf("note with a control character: %v", err)
	}
	if op, _ := j.Client.Lookup(ctx, &pb.LookupRequest{OperationKey: "k"}); op.GetOperation().GetNote() != "refund asked\nticket 4711" {
		t.Fatalf("a refused note changed the note: %q", op.GetOperation().GetNote())
	}
	if out, err := run(t, j.Client, "note", "k", "", "--actor", "alice"); err != nil || !strings.Contains(out, "note cleared") {
		t.Fatalf("clear: %v\n%s", err, out)
	}
	if out, _ := run(t, j.Client, "show", "k"); strings.Contains(out, "note:") || strings.Contains(out, "refund") {
		t.Fatalf("show after clearing:\n%s", out)
	}
	if _, err := run(t, j.Client, "note", "k"); !errors.Is(err, ops.ErrUsage) {
		t.Fatalf("note without TEXT: %v", err)
	}
}

// TestApproveAndReject: list finds what awaits approval, show prints the
// approval, approve with another hash is refused and changes nothing,
// approve and reject with the shown hash decide, and missing --hash or
// --reason is a usage error.
func TestApproveAndReject(t *testing.T) {
	t.Parallel()
	pol, err := policy.Parse([]byte("actions:\n  wire:\n    approval: {required: true}\n"), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	j := testserver.Start(t, pol)
	ctx := context.Background()
	hashes := map[string]string{}
	for _, key := range []string{"a", "b"} {
		r, err := j.Client.Register(ctx, &pb.RegisterRequest{OperationKey: key, ActionType: "wire", Payload: &structpb.Struct{}})
		if err != nil {
			t.Fatal(err)
		}
		hashes[key] = r.GetOperation().GetRequestHash()
	}
	out, err := run(t, j.Client, "list", "--status", "awaiting_approval")
	if err != nil || !strings.Contains(out, "awaiting_approval") || strings.Count(out, "\n") != 3 {
		t.Fatalf("list awaiting_approval: %v\n%s", err, out)
	}
	out, err = run(t, j.Client, "show", "a")
	if err != nil || !strings.Contains(out, "approval") || !strings.Contains(out, "required (required); by operator or admin") || !strings.Contains(out, hashes["a"]) {
		t.Fatalf("show: %v\n%s", err, out)
	}
	if _, err := run(t, j.Client, "approve", "a", "--hash", hashes["b"]+"0", "--reason", "ok", "--actor", "alice"); client.CodeOf(err) != "PAYLOAD_MISMATCH" {
		t.Fatalf("approve with another hash: %v", err)
	}
	for _, args := range [][]string{{"approve", "a", "--reason", "ok"}, {"approve", "a", "--hash", hashes["a"]}, {"reject", "b", "--reason", "no"}} {
		if _, err := run(t, j.Client, args...); !errors.Is(err, ops.ErrUsage) {
			t.Fatalf("%v: %v", args, err)
		}
	}
	if out, err := run(t, j.Client, "approve", "a", "--hash", hashes["a"], "--reason", "ok", "--actor", "alice"); err != nil || !strings.Contains(out, "a approved: now pending") {
		t.Fatalf("approve: %v\n%s", err, out)
	}
	if out, err := run(t, j.Client, "reject", "b", "--hash", hashes["b"], "--reason", "no", "--error-code", "not_wanted", "--actor", "alice"); err != nil ||
		!strings.Contains(out, "b rejected: now failed_final (not_wanted)") {
		t.Fatalf("reject: %v\n%s", err, out)
	}
	out, _ = run(t, j.Client, "show", "a")
	if !strings.Contains(out, "approval 1") || !strings.Contains(out, "alice at ") {
		t.Fatalf("show after the approval:\n%s", out)
	}
}
