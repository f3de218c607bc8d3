package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal/client"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// TestOperatorNote: an operator sets a note on a terminal operation over
// REST and replaces it over gRPC; Lookup and the FULL list carry it, the
// BASIC list does not; the history records it with the principal as the
// actor. A note too long or with a control character is 400
// INVALID_ARGUMENT on both transports and changes nothing (no event
// either); an agent's token is 403 PERMISSION_DENIED; another tenant's
// operator finds no such operation. On both stores.
func TestOperatorNote(t *testing.T) {
	t.Parallel()
	for name, db := range map[string]func(t *testing.T) string{"sqlite": sqliteURL, "postgres": pgURL} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv, _ := secured(t, "--database-url", db(t))
			testOperatorNote(t, srv)
		})
	}
}

func testOperatorNote(t *testing.T, srv *proc) {
	ctx := ctxFor(t)
	const key = "payment:order-900:intent-01"
	agent, oper := as(t, srv, agentA), as(t, srv, operA)
	payload, _ := structpb.NewStruct(map[string]any{"order_id": "900", "amount_minor": 100, "currency": "EUR"})
	r, err := agent.Register(ctx, &pb.RegisterRequest{OperationKey: key, ActionType: "create_payment", Payload: payload, Claim: &pb.ClaimOptions{WorkerId: "agent-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agent.MarkSucceeded(ctx, &pb.MarkSucceededRequest{OperationKey: key, Attempt: r.GetAttempt(), ExternalId: "pay_900"}); err != nil {
		t.Fatal(err)
	}
	rest := func(token, body string) (int, map[string]any) {
		t.Helper()
		code, _, text := doAs(t, token, http.MethodPost, srv.BaseURL+"/v1/operations:note", body)
		var out map[string]any
		if err := json.Unmarshal([]byte(text), &out); err != nil {
			t.Fatalf("REST answer %d is not JSON: %s", code, text)
		}
		return code, out
	}
	restBody := func(note string) string {
		b, _ := json.Marshal(map[string]string{"operation_key": key, "note": note})
		return string(b)
	}
	lookup := func() *pb.Operation {
		t.Helper()
		res, err := oper.Lookup(ctx, &pb.LookupRequest{OperationKey: key})
		if err != nil {
			t.Fatal(err)
		}
		return res.GetOperation()
	}
	eventCount := func() int {
		t.Helper()
		res, err := oper.ListEvents(ctx, &pb.ListEventsRequest{OperationKey: key})
		if err != nil {
			t.Fatal(err)
		}
		return len(res.GetEvents())
	}

	// REST: set it on a succeeded operation.
	note := "refund asked by the customer\nticket 4711 — «urgent»"
	code, out := rest(operA, restBody(note))
	if code != http.StatusOK {
		t.Fatalf("REST note: %d %v", code, out)
	}
	if op, _ := out["operation"].(map[string]any); op["note"] != note || op["status"] != "STATUS_SUCCEEDED" {
		t.Fatalf("REST note answer: %v", out)
	}
	if got := lookup(); got.GetNote() != note || got.GetStatus() != pb.Status_STATUS_SUCCEEDED || got.GetExternalId() != "pay_900" {
		t.Fatalf("lookup after the note: %v", got)
	}
	evs, err := oper.ListEvents(ctx, &pb.ListEventsRequest{OperationKey: key})
	if err != nil {
		t.Fatal(err)
	}
	last := evs.GetEvents()[len(evs.GetEvents())-1]
	if last.GetReason() != "note" || last.GetActor() != "team-a-operator" || last.GetFromStatus() != pb.Status_STATUS_SUCCEEDED || last.GetToStatus() != pb.Status_STATUS_SUCCEEDED {
		t.Fatalf("the note's event: %v", last)
	}

	// The views: FULL carries the note, BASIC does not.
	for view, want := range map[pb.OperationView]string{pb.OperationView_OPERATION_VIEW_FULL: note, pb.OperationView_OPERATION_VIEW_BASIC: ""} {
		res, err := oper.ListOperations(ctx, &pb.ListOperationsRequest{View: view})
		if err != nil || len(res.GetOperations()) != 1 || res.GetOperations()[0].GetNote() != want {
			t.Fatalf("list in %s: %v %v", view, res, err)
		}
		l, err := oper.Lookup(ctx, &pb.LookupRequest{OperationKey: key, View: view})
		if err != nil || l.GetOperation().GetNote() != want {
			t.Fatalf("lookup in %s: %v %v", view, l, err)
		}
	}
	_, _, text := doAs(t, operA, http.MethodGet, srv.BaseURL+"/v1/operations?view=OPERATION_VIEW_FULL", "")
	if !strings.Contains(text, `"note":"refund asked by the customer\nticket 4711`) {
		t.Fatalf("REST list in FULL lacks the note: %s", text)
	}
	_, _, text = doAs(t, operA, http.MethodGet, srv.BaseURL+"/v1/operations:lookup?operation_key="+url.QueryEscape(key)+"&view=OPERATION_VIEW_BASIC", "")
	if !strings.Contains(text, `"note":""`) {
		t.Fatalf("REST lookup in BASIC: %s", text)
	}

	// gRPC: replace it.
	res, err := oper.SetNote(ctx, &pb.SetNoteRequest{OperationKey: key, Note: "refunded"})
	if err != nil || res.GetOperation().GetNote() != "refunded" {
		t.Fatalf("gRPC note: %v %v", res, err)
	}

	// Bad input changes nothing, on both transports: too long (in
	// characters: 2,000 two-byte characters pass, 2,001 do not), a control
	// character. (Invalid UTF-8 cannot be sent: protobuf and JSON clients
	// refuse to encode it; the journal's test covers it.)
	before, n := lookup(), eventCount()
	for what, bad := range map[string]string{
		"too long":      strings.Repeat("é", 2001),
		"a tab":         "a\tb",
		"a bell":        "ring\a",
		"a C1 control":  "x\u0085y",
		"carriage ret.": "line\r\n",
	} {
		code, out := rest(operA, restBody(bad))
		if e, _ := out["error"].(map[string]any); code != http.StatusBadRequest || e["code"] != "INVALID_ARGUMENT" || e["field"] != "note" {
			t.Errorf("REST note with %s: %d %v", what, code, out)
		}
		_, err := oper.SetNote(ctx, &pb.SetNoteRequest{OperationKey: key, Note: bad})
		if status.Code(err) != codes.InvalidArgument || client.CodeOf(err) != "INVALID_ARGUMENT" {
			t.Errorf("gRPC note with %s: %v", what, err)
		}
	}
	// An agent may not write notes; neither may another tenant's
	// operator reach this tenant's operation.
	if code, out := rest(agentA, restBody("mine")); code != http.StatusForbidden || out["error"].(map[string]any)["code"] != "PERMISSION_DENIED" {
		t.Errorf("REST note by an agent: %d %v", code, out)
	}
	if _, err := agent.SetNote(ctx, &pb.SetNoteRequest{OperationKey: key, Note: "mine"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("gRPC note by an agent: %v", err)
	}
	if _, err := as(t, srv, adminB).SetNote(ctx, &pb.SetNoteRequest{OperationKey: key, Note: "theirs"}); client.CodeOf(err) != "NOT_FOUND" {
		t.Errorf("note by another tenant's admin: %v", err)
	}
	if after := lookup(); !proto.Equal(after, before) || eventCount() != n {
		t.Fatalf("a refused note changed the operation:\nbefore %v\nafter  %v (events %d → %d)", before, after, n, eventCount())
	}

	// The longest note passes; an empty one clears it.
	if _, err := oper.SetNote(ctx, &pb.SetNoteRequest{OperationKey: key, Note: strings.Repeat("é", 2000)}); err != nil {
		t.Fatalf("a note of exactly 2,000 characters: %v", err)
	}
	if code, out := rest(operA, fmt.Sprintf(`{"operation_key": %q}`, key)); code != http.StatusOK || lookup().GetNote() != "" {
		t.Fatalf("clear: %d %v", code, out)
	}
	if got := eventCount(); got != n+2 {
		t.Fatalf("events after the longest note and the clearing: %d, want %d", got, n+2)
	}
}
