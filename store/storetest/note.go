package storetest

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/store"
)

// setNote applies SetNote as an operator would.
func setNote(t *testing.T, s store.Store, key, note string) (*opjournal.Operation, error) {
	t.Helper()
	return Op(s.Apply(ctxT(t), tenant, &protocol.Command{Kind: protocol.CmdSetNote, Key: key, Note: note, Actor: "alice", StatedActor: "al"}))
}

// withoutNote is op with its note and updated_at cleared: what a note must
// leave exactly as it was.
func withoutNote(op *opjournal.Operation) opjournal.Operation {
	c := *op
	c.Note, c.UpdatedAt = "", time.Time{}
	return c
}

// testSetNote: a note is taken in every status, terminal and under review
// included; it changes nothing but the note (and updated_at); the history
// records it (reason "note", the principal as actor, the status unchanged);
// an empty note clears it; Get and the FULL list carry it, the BASIC list
// does not; an unknown key is NOT_FOUND and writes nothing.
func testSetNote(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	register(t, s, "pending")
	claimed(t, s, "running", noRetry)
	makeUnknown(t, s, "unknown")
	succeed(t, s, "done", nil)
	cr := claimed(t, s, "refused", noRetry)
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkFailedFinal, Key: "refused", Attempt: cr.Operation.AttemptCount, ErrorCode: "declined"})); err != nil {
		t.Fatal(err)
	}
	// A duplicate effect: succeeded and under review.
	succeed(t, s, "dup", nil)
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "dup", Attempt: 1, ExternalID: "pay_other"})); err != nil {
		t.Fatal(err)
	}
	note := "refund asked by the customer\nticket 4711 — «urgent»"
	for _, key := range []string{"pending", "running", "unknown", "done", "refused", "dup"} {
		before := get(t, s, key)
		evsBefore := events(t, s, key)
		op, err := setNote(t, s, key, note)
		if err != nil {
			t.Fatalf("note on %s (%s): %v", key, before.Status, err)
		}
		if op.Note != note {
			t.Fatalf("note on %s: answer has note %q", key, op.Note)
		}
		if a, b := withoutNote(before), withoutNote(op); !reflect.DeepEqual(a, b) {
			t.Fatalf("a note on %s changed more than the note:\nbefore %+v\nafter  %+v", key, a, b)
		}
		if got := get(t, s, key); got.Note != note || !reflect.DeepEqual(withoutNote(got), withoutNote(before)) {
			t.Fatalf("read back %s: note %q, %+v", key, got.Note, *got)
		}
		evs := events(t, s, key)
		if len(evs) != len(evsBefore)+1 {
			t.Fatalf("note on %s: %d events after %d:\n%s", key, len(evs), len(evsBefore), fmtEvents(evs))
		}
		e := evs[len(evs)-1]
		if e.Reason != opjournal.ReasonNote || e.Actor != "alice" || e.StatedActor != "al" ||
			e.From != before.Status || e.To != before.Status || e.Attempt != before.AttemptCount || e.ExternalID != "" {
			t.Fatalf("note on %s (%s): event %s stated=%q", key, before.Status, fmtEvent(e), e.StatedActor)
		}
		if strings.Contains(e.Reason, "refund") {
			t.Fatalf("the history holds the note's text: %q", e.Reason)
		}
		if k := opjournal.KindOf(e.Reason); k != opjournal.KindNoted {
			t.Fatalf("a note's event is of kind %s", k)
		}
	}
	// The lists: FULL carries the note, BASIC leaves it out.
	for _, basic := range []bool{false, true} {
		ops, _, err := s.List(ctx, store.ListParams{Tenant: tenant, Basic: basic, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range ops {
			if want := map[bool]string{false: note, true: ""}[basic]; op.Note != want {
				t.Fatalf("list (basic %v): %s has note %q, want %q", basic, op.Key, op.Note, want)
			}
		}
	}
	// Replacing and clearing.
	if op, err := setNote(t, s, "done", "second thoughts"); err != nil || op.Note != "second thoughts" {
		t.Fatalf("replace: %v %+v", err, op)
	}
	if op, err := setNote(t, s, "done", ""); err != nil || op.Note != "" || get(t, s, "done").Note != "" {
		t.Fatalf("clear: %v %+v", err, op)
	}
	if n := len(events(t, s, "done")); n != 6 { // registered, claimed, confirmed, three notes
		t.Fatalf("done has %d events:\n%s", n, fmtEvents(events(t, s, "done")))
	}
	// The protocol goes on as before: the noted operation is still claimed
	// by its holder, and a claim of the noted pending one wins.
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "running", Attempt: 1, ExternalID: "pay_r"})); err != nil {
		t.Fatalf("mark succeeded after a note: %v", err)
	}
	if got := get(t, s, "running"); got.Status != succeeded || got.Note != note {
		t.Fatalf("after mark succeeded: %s, note %q", got.Status, got.Note)
	}
	if cr := claim(t, s, "pending", noRetry); !cr.Claimed || cr.Operation.Note != note {
		t.Fatalf("claim after a note: %+v", cr)
	}
	// An unknown key is NOT_FOUND and creates nothing.
	_, err := setNote(t, s, "nope", "x")
	wantCode(t, err, opjournal.CodeNotFound)
	if _, err := s.Get(ctx, tenant, "nope"); opjournal.ErrorCode(err) != opjournal.CodeNotFound {
		t.Fatalf("get nope after a refused note: %v", err)
	}
	// Another tenant's note does not reach this tenant's row.
	if _, err := Op(s.Apply(ctx, "other", &protocol.Command{Kind: protocol.CmdSetNote, Key: "pending", Note: "theirs", Actor: "bob"})); opjournal.ErrorCode(err) != opjournal.CodeNotFound {
		t.Fatalf("another tenant's note: %v", err)
	}
	if got := get(t, s, "pending").Note; got != note {
		t.Fatalf("after another tenant's note: %q", got)
	}
}
