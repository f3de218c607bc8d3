package protocol_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/protocol"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// states is a grid of operations in every status, with and without review,
// with live and expired leases, fresh and old attempts, and duplicates.
func states() []*opjournal.Operation {
	var out []*opjournal.Operation
	base := opjournal.Operation{Key: "k", Action: "pay", RequestHash: "h", AttemptCount: 2,
		CreatedAt: t0.Add(-time.Hour), AttemptStartedAt: t0.Add(-time.Minute)}
	for _, st := range []opjournal.Status{opjournal.StatusPending, opjournal.StatusInProgress, opjournal.StatusUnknown, opjournal.StatusSucceeded, opjournal.StatusFailedFinal} {
		for _, review := range []bool{false, true} {
			op := base
			op.Status, op.NeedsReview = st, review
			switch st {
			case opjournal.StatusInProgress:
				live, expired := op, op
				live.LeaseUntil = t0.Add(time.Minute)
				expired.LeaseUntil, expired.Status = t0.Add(-time.Minute), opjournal.StatusUnknown
				out = append(out, &live, &expired)
				continue
			case opjournal.StatusUnknown:
				op.UnknownSince = t0.Add(-10 * time.Second)
			case opjournal.StatusSucceeded:
				op.ExternalID = "pay_1"
				dup := op
				dup.DuplicateExternalIDs = []string{"pay_2"}
				out = append(out, &dup)
			}
			out = append(out, &op)
		}
	}
	return out
}

// commands is one of every command, with attempts 1 (stale), 2 (latest)
// and 3 (never issued) where they take one.
func commands() []*protocol.Command {
	var out []*protocol.Command
	pol := protocol.CommandPolicy{RetryAfterUnknown: true, DefinitiveAbsence: true, ReleaseAfter: 5 * time.Second, MaxAttempt: time.Hour}
	for _, a := range []int{1, 2, 3} {
		for _, kind := range []protocol.CommandKind{protocol.CmdExtendLease, protocol.CmdMarkSucceeded, protocol.CmdMarkUnknown,
			protocol.CmdMarkFailedFinal, protocol.CmdReleaseForRetry, protocol.CmdRecordCheck} {
			for _, ext := range []string{"", "pay_1", "pay_3"} {
				out = append(out, &protocol.Command{Kind: kind, Key: "k", Attempt: a, ExternalID: ext, LeaseSeconds: 30,
					NextCheckAfter: time.Minute, Reason: "r", Policy: pol, Actor: "p"})
			}
		}
	}
	for _, res := range []opjournal.Status{opjournal.StatusSucceeded, opjournal.StatusFailedFinal} {
		out = append(out, &protocol.Command{Kind: protocol.CmdResolve, Key: "k", Resolution: res, ExternalID: "pay_9", Reason: "r", Actor: "op"})
	}
	out = append(out,
		&protocol.Command{Kind: protocol.CmdClaim, Key: "k", WorkerID: "w", LeaseSeconds: 30, Policy: pol},
		&protocol.Command{Kind: protocol.CmdClaim, Key: "k", WorkerID: "w", LeaseSeconds: 30},
		&protocol.Command{Kind: protocol.CmdEscalate, Key: "k", Reason: "r", Actor: "r"},
		&protocol.Command{Kind: protocol.CmdAcknowledge, Key: "k", Reason: "r", Actor: "op"},
		&protocol.Command{Kind: protocol.CmdRegister, Key: "k", RequestHash: "h"},
		&protocol.Command{Kind: protocol.CmdRegister, Key: "k", RequestHash: "other"},
	)
	return out
}

// TestTableIsComplete: for every command and every state, the table either
// applies a rule or refuses with a code of the protocol: never "no rule
// applies" (a hole), and never a panic.
func TestTableIsComplete(t *testing.T) {
	for _, op := range states() {
		for _, c := range commands() {
			d, err := protocol.Apply(op, c, t0)
			if err != nil {
				if opjournal.ErrorCode(err) == opjournal.CodeInternal {
					t.Errorf("%s (attempt %d) on %s/review=%v: %v", c.Kind, c.Attempt, op.Status, op.NeedsReview, err)
				}
				continue
			}
			if d.Rule == nil || d.Op == nil {
				t.Errorf("%s on %s: no rule or no result", c.Kind, op.Status)
			}
		}
	}
}

// TestTerminalStatesNeverChange: no command moves a succeeded or
// failed_final operation to another status.
func TestTerminalStatesNeverChange(t *testing.T) {
	for _, op := range states() {
		if !op.Status.Terminal() {
			continue
		}
		for _, c := range commands() {
			if d, err := protocol.Apply(op, c, t0); err == nil && d.Op.Status != op.Status {
				t.Errorf("%s moved a %s operation to %s (rule %q)", c.Kind, op.Status, d.Op.Status, d.Rule.Case)
			}
		}
	}
}

// TestRepeatedReportsAreBounded: reports of other effects keep at most
// MaxDuplicateExternalIDs ids and write at most that many events, however
// many come; an empty external_id is never a
// duplicate.
func TestRepeatedReportsAreBounded(t *testing.T) {
	op := &opjournal.Operation{Key: "k", Status: opjournal.StatusSucceeded, ExternalID: "pay_1", AttemptCount: 1}
	events := 0
	for i := range 1100 {
		ext := "pay_dup_" + strings.Repeat("x", i%7) + itoa(i)
		if i%3 == 0 {
			ext = ""
		}
		d, err := protocol.Apply(op, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "k", Attempt: 1, ExternalID: ext}, t0)
		if err != nil {
			t.Fatal(err)
		}
		if ext == "" && d.Rule.Case != "repeat" {
			t.Fatalf("an empty external_id took rule %q", d.Rule.Case)
		}
		if d.Event != nil {
			events++
		}
		op = d.Op
	}
	if len(op.DuplicateExternalIDs) != opjournal.MaxDuplicateExternalIDs || events != opjournal.MaxDuplicateExternalIDs {
		t.Fatalf("%d ids kept, %d events; want %d of each", len(op.DuplicateExternalIDs), events, opjournal.MaxDuplicateExternalIDs)
	}
	if op.DuplicateReports != 733 || !op.NeedsReview || op.Status != opjournal.StatusSucceeded || op.ExternalID != "pay_1" {
		t.Fatalf("after the reports: %+v", op)
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// TestFirstRulesDoNotReadTheRow: PostgreSQL runs a command's first rule
// (the first whose command-only conditions hold) without reading the row,
// so its computed texts must not need it.
func TestFirstRulesDoNotReadTheRow(t *testing.T) {
	for _, c := range commands() {
		for _, r := range protocol.Rules(c.Kind) {
			if r.Outcome != protocol.Changed {
				continue
			}
			func() {
				defer func() {
					if p := recover(); p != nil && r == protocol.Rules(c.Kind)[0] {
						t.Errorf("%s/%s reads the row in its texts: %v", c.Kind, r.Case, p)
					}
				}()
				_ = c.Value(protocol.ParamEventReason, r, nil)
				_ = c.Value(protocol.ParamReviewReason, r, nil)
			}()
			break
		}
	}
}

// protocolDoc is the document that shows the protocol table, from the
// repository's root: the page protocolgen writes.
var protocolDoc = filepath.Join("docs", "protocol.md")

// TestProtocolPageShowsTheProtocol: docs/protocol.md's table is the one
// the code applies (regenerate it with go run ./protocol/cmd/protocolgen
// docs/protocol.md).
func TestProtocolPageShowsTheProtocol(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", protocolDoc))
	if err != nil {
		t.Fatal(err)
	}
	want, err := protocol.SpliceProtocol(string(b))
	if err != nil {
		t.Fatal(err)
	}
	if want != string(b) {
		t.Fatalf("%s's protocol table differs from protocol/table.go: run `go run ./protocol/cmd/protocolgen` (make generate)", protocolDoc)
	}
}
