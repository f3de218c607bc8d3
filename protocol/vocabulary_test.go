package protocol

import (
	"strings"
	"testing"
	"time"

	"github.com/opjournal/opjournal"
)

// TestEveryFieldAndParamHasItsRow: each constant has its row in the
// vocabularies (a column; a name and exactly one accessor), so a new one
// cannot be half added.
func TestEveryFieldAndParamHasItsRow(t *testing.T) {
	for f := FieldStatus; f <= FieldBudgets; f++ {
		if d := f.def(); d == nil || (d.get == nil) != (d.set == nil) {
			t.Errorf("field %d (%s): no row, or a getter without a setter", f, f.Column())
		}
	}
	if len(fields) != int(FieldBudgets)+1 {
		t.Errorf("%d field rows for %d fields", len(fields)-1, FieldBudgets)
	}
	for p := ParamWorkerID; p <= ParamBudgets; p++ {
		d := p.def()
		n := 0
		for _, set := range []bool{d.text != nil, d.int != nil, d.bool != nil, d.duration != nil, d.json != nil} {
			if set {
				n++
			}
		}
		if n != 1 || strings.HasPrefix(p.Name(), "param(") {
			t.Errorf("parameter %d (%s): %d accessors, want 1", p, p.Name(), n)
		}
	}
	if len(params) != int(ParamBudgets)+1 {
		t.Errorf("%d parameter rows for %d parameters", len(params)-1, ParamBudgets)
	}
}

// TestRefusalsAreData: every refusal of the table has a code, and its
// error carries that code and field.
func TestRefusalsAreData(t *testing.T) {
	op := &opjournal.Operation{Key: "k", Status: opjournal.StatusPending}
	n := 0
	for _, r := range table {
		for _, req := range r.Requires {
			if req.Refuse == nil {
				continue
			}
			n++
			err := req.Refuse.Error(op, &Command{Kind: r.Command}, time.Time{})
			if req.Refuse.Code == "" || err.Code != req.Refuse.Code || err.Field != req.Refuse.Field || err.Message == "" {
				t.Errorf("%s %q: refusal %+v gives %+v", r.Command, r.Case, *req.Refuse, err)
			}
		}
	}
	if n < 10 {
		t.Fatalf("only %d refusals in the table", n)
	}
}

// TestEveryKindHasARow: every condition and expression kind has its row
// in the tables of kinds.go (a constant without one would panic when a
// rule used it).
func TestEveryKindHasARow(t *testing.T) {
	if got, want := len(CondKinds()), int(CondOr); got != want {
		t.Errorf("%d condition kinds have a row, want %d", got, want)
	}
	if got, want := len(ExprKinds()), int(ExprAppendApproval); got != want {
		t.Errorf("%d expression kinds have a row, want %d", got, want)
	}
}
