package linearize

import (
	"context"
	"fmt"
	"testing"

	"github.com/opjournal/opjournal/protocol/model"
)

// step is one call of a script, with what the test expects of the
// answer beyond the model's (docs/protocol-answers.md states each).
type step struct {
	in    model.Input
	check func(model.Output) error
}

// TestProtocolAnswers runs, one call at a time on the SQLite store and the
// test's clock, the scripts behind docs/protocol-answers.md: every answer
// must be the model's, and the assertions name the answer the document
// gives, so a change of behaviour fails here before the document is wrong.
func TestProtocolAnswers(t *testing.T) {
	t.Parallel()
	c := newClocked(t)
	c.add(t, openSQLite(t))
	e, stop, err := Serve(context.Background(), c.stores[0], c.pol)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	base := c.base()
	cl, err := Dial(e, base)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	m := ModelOf(c.pol)
	at := func() int64 { return c.clock.Now().Sub(base).Milliseconds() }

	reg := func(claim bool) model.Input {
		return model.Input{Kind: model.Register, Action: "pay_reconcile", Claim: claim, Worker: "w1"}
	}
	ms := func(attempt int, id string) model.Input {
		return model.Input{Kind: model.MarkSucceeded, Attempt: attempt, ExternalID: id}
	}
	ack := model.Input{Kind: model.Acknowledge}
	wantErr := func(code string) func(model.Output) error {
		return func(o model.Output) error {
			if o.Err != code {
				return fmt.Errorf("error %q, want %q", o.Err, code)
			}
			return nil
		}
	}
	want := func(what string, ok func(model.Output) bool) func(model.Output) error {
		return func(o model.Output) error {
			if !ok(o) {
				return fmt.Errorf("want %s", what)
			}
			return nil
		}
	}
	failedFinal := []step{{in: reg(true)}, {in: model.Input{Kind: model.MarkFailedFinal, Attempt: 1, ErrorCode: "card_declined"}}}
	scripts := map[string][]step{
		"attempt 0 on an unknown key is INVALID_ARGUMENT, attempt 1 NOT_FOUND": {
			{in: ms(0, "x1"), check: wantErr("INVALID_ARGUMENT")},
			{in: ms(1, "x1"), check: wantErr("NOT_FOUND")},
			{in: model.Input{Kind: model.ReleaseForRetry, Attempt: 0}, check: wantErr("INVALID_ARGUMENT")},
		},
		"a late effect after failed_final: review, the id kept, every report counted": append(failedFinal[:2:2],
			step{in: ms(1, "x1"), check: want("under review, [x1], 1 report", func(o model.Output) bool {
				return o.Op.NeedsReview && o.Op.DuplicateIDs == "x1" && o.Op.Reports == 1 && o.Op.Status == model.FailedFinal
			})},
			step{in: ack},
			// the same id again after the acknowledge: a person looks again, nothing new kept
			step{in: ms(1, "x1"), check: want("under review again, [x1], 2 reports", func(o model.Output) bool {
				return o.Op.NeedsReview && o.Op.DuplicateIDs == "x1" && o.Op.Reports == 2
			})},
			step{in: ack},
			// without an id: reviewed too, only counted
			step{in: ms(1, ""), check: want("under review, 3 reports", func(o model.Output) bool { return o.Op.NeedsReview && o.Op.Reports == 3 })},
		),
		"the cap of 10 holds after failed_final too; a report beyond it is counted and still reviewed": func() []step {
			s := append([]step{}, failedFinal...)
			for i := 1; i <= 11; i++ {
				s = append(s, step{in: ms(1, fmt.Sprintf("x%d", i))})
			}
			s = append(s, step{in: ack}, step{in: ms(1, "x12"), check: want("10 kept, 12 reports, under review", func(o model.Output) bool {
				return o.Op.NeedsReview && o.Op.Reports == 12 && o.Op.DuplicateID == "x1" && len(o.Op.DuplicateIDs) == len("x1,x2,x3,x4,x5,x6,x7,x8,x9,x10")
			})})
			return s
		}(),
		"duplicate_external_id is the first duplicate, not the latest": {
			{in: reg(true)}, {in: ms(1, "x1")}, {in: ms(1, "x2")}, {in: ms(1, "x3"), check: want("duplicate_external_id x2", func(o model.Output) bool {
				return o.Op.DuplicateID == "x2" && o.Op.DuplicateIDs == "x2,x3"
			})},
		},
		// Register answers a terminal operation's final record: the review
		// (needs_review, the duplicates) is Lookup's (journal.finalRecord).
		"next for a terminal operation under review: REPLAY, FAILED_FINAL": {
			{in: reg(true)}, {in: ms(1, "x1")}, {in: ms(1, "x2")},
			{in: model.Input{Kind: model.Lookup}, check: want("under review", func(o model.Output) bool { return o.Op.NeedsReview && o.Op.DuplicateIDs == "x2" })},
			{in: reg(false), check: want("REPLAY, the final record", func(o model.Output) bool {
				return o.Next == model.NextReplay && !o.Op.NeedsReview && o.Op.DuplicateIDs == "" && o.Op.ExternalID == "x1"
			})},
			{in: reg(true), check: want("REPLAY, not claimed", func(o model.Output) bool { return o.Next == model.NextReplay && !o.Claimed })},
		},
		"next for failed_final under review": append(failedFinal[:2:2], step{in: ms(1, "x1")},
			step{in: model.Input{Kind: model.Lookup}, check: want("under review", func(o model.Output) bool { return o.Op.NeedsReview })},
			step{in: reg(false), check: want("FAILED_FINAL, the final record", func(o model.Output) bool { return o.Next == model.NextFailedFinal && !o.Op.NeedsReview })}),
		"a confirm leaves error_code as it was": {
			{in: reg(true)}, {in: model.Input{Kind: model.MarkUnknown, Attempt: 1, ErrorCode: "timeout"}}, {in: ms(1, "x1"), check: want("succeeded with error_code timeout", func(o model.Output) bool {
				return o.Op.Status == model.Succeeded && o.Op.ErrorCode == "timeout"
			})},
		},
		"retry_after_seconds only while another lease is live": {
			{in: reg(true)},
			{in: model.Input{Kind: model.Claim, Worker: "w2"}, check: want("retry_after 5", func(o model.Output) bool { return !o.Claimed && o.RetryAfter == 5 && o.Next == model.NextWait })},
			{in: model.Input{Kind: model.MarkUnknown, Attempt: 1}},
			{in: model.Input{Kind: model.Claim, Worker: "w2"}, check: want("retry_after 0, verification", func(o model.Output) bool {
				return !o.Claimed && o.RetryAfter == 0 && o.Next == model.NextVerification
			})},
		},
		"ReleaseForRetry: too early, under review and not definitive are all INVALID_STATE": {
			{in: reg(true)}, {in: model.Input{Kind: model.MarkUnknown, Attempt: 1}},
			{in: model.Input{Kind: model.ReleaseForRetry, Attempt: 1}, check: wantErr("INVALID_STATE")}, // too early
			{in: model.Input{Kind: model.Escalate}},
			{in: model.Input{Kind: model.ReleaseForRetry, Attempt: 1}, check: wantErr("INVALID_STATE")}, // under review
		},
		"Register with a claim on an existing key is a replay and a claim": {
			{in: reg(false)},
			{in: reg(true), check: want("not created, claimed, attempt 1", func(o model.Output) bool { return !o.Created && o.Claimed && o.Attempt == 1 })},
		},
	}
	n := 0
	for name, script := range scripts {
		n++
		key := fmt.Sprintf("answer-%d", n)
		var st model.State
		for i, s := range script {
			in := s.in
			in.Key, in.Now, in.REST = key, at(), i%2 == 1
			got := cl.Do(context.Background(), in)
			w, next := m.Step(st, in)
			if !model.Agree(w, got, true) {
				t.Fatalf("%s, step %d:\ngot  %s\nwant %s", name, i, model.Describe(in, got), model.Describe(in, w))
			}
			if s.check != nil {
				if err := s.check(got); err != nil {
					t.Fatalf("%s, step %d: %v; got %s", name, i, err, model.Describe(in, got))
				}
			}
			st = next
		}
	}
}
