package console

import (
	"fmt"
	"html/template"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/journal"
)

// A queue is one of the lists a person works through.
type queue struct {
	ID    string
	Label string
	// Help says what is in it and what to do.
	Help string
}

var queues = []queue{
	{"review", "Needs review", "Operations the reconciler handed to a person, and detected duplicate effects. Decide each one."},
	{"unknown", "Outcome unknown", "The agent does not know whether the provider acted. The reconciler is still checking these; overdue checks come first."},
	{"expired", "Expired leases", "Attempts whose lease ran out without an answer: their outcome is unknown too."},
	{"all", "All operations", "Every operation of your tenant, with the filters below."},
}

func queueByID(id string) (queue, bool) {
	for _, q := range queues {
		if q.ID == id {
			return q, true
		}
	}
	return queue{}, false
}

// filter is a queue's selection, from the query (or a bulk form's fields).
type filter struct {
	Queue  string
	Action string
	Status string
	// Refs is "name=value" pairs separated by spaces or commas.
	Refs      string
	KeyPrefix string
	// After and Before bound the last change, as the form's
	// datetime-local text (UTC).
	After, Before string
	Page          string
}

// timeLayout is an <input type="datetime-local"> value, read as UTC.
const timeLayout = "2006-01-02T15:04"

func filterFrom(v url.Values) filter {
	f := filter{Queue: v.Get("queue"), Action: v.Get("action"), Status: v.Get("status"), Refs: v.Get("refs"),
		KeyPrefix: v.Get("key_prefix"), After: v.Get("after"), Before: v.Get("before"), Page: v.Get("page")}
	if f.Queue == "" {
		f.Queue = "review"
	}
	return f
}

// values is the filter as a query (without the page token).
func (f filter) values() url.Values {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("queue", f.Queue)
	set("action", f.Action)
	set("status", f.Status)
	set("refs", f.Refs)
	set("key_prefix", f.KeyPrefix)
	set("after", f.After)
	set("before", f.Before)
	return v
}

// Query is the filter as a URL query, for links: already encoded, so
// typed for html/template not to encode it again.
func (f filter) Query() template.URL { return template.URL(f.values().Encode()) } // #nosec: url.Values.Encode escapes every value

// Narrowed reports whether anything beyond the queue is set.
func (f filter) Narrowed() bool {
	return f.Action != "" || f.Status != "" || f.Refs != "" || f.KeyPrefix != "" || f.After != "" || f.Before != ""
}

// request turns the filter into a ListRequest for caller, or says (as an
// opjournal error naming the field) what is wrong with it.
func (f filter) request(c journal.Caller) (journal.ListRequest, error) {
	req := journal.ListRequest{Caller: c, PageToken: f.Page, ListFilter: journal.ListFilter{Action: f.Action, KeyPrefix: f.KeyPrefix}}
	yes, no := true, false
	switch f.Queue {
	case "review":
		req.NeedsReview = &yes
	case "unknown":
		req.Statuses, req.NeedsReview = []opjournal.Status{opjournal.StatusUnknown}, &no
	case "expired":
		req.LeaseExpired = true
	case "all":
	default:
		return req, opjournal.Errorf(opjournal.CodeInvalidArgument, "queue", "%q is not a queue (review, unknown, expired, all)", f.Queue)
	}
	if f.Status != "" {
		st := opjournal.Status(f.Status)
		if !st.Valid() {
			return req, opjournal.Errorf(opjournal.CodeInvalidArgument, "status", "%q is not a status", f.Status)
		}
		if len(req.Statuses) > 0 && !slices.Contains(req.Statuses, st) {
			return req, opjournal.Errorf(opjournal.CodeInvalidArgument, "status", "the %s queue holds only %s operations", f.Queue, req.Statuses[0])
		}
		req.Statuses = []opjournal.Status{st}
	}
	refs, err := parseRefs(f.Refs)
	if err != nil {
		return req, err
	}
	req.Refs = refs
	for _, b := range []struct {
		field, text string
		into        *time.Time
	}{{"after", f.After, &req.UpdatedAfter}, {"before", f.Before, &req.UpdatedBefore}} {
		if b.text == "" {
			continue
		}
		t, err := time.ParseInLocation(timeLayout, b.text, time.UTC)
		if err != nil {
			return req, opjournal.Errorf(opjournal.CodeInvalidArgument, b.field, "%q is not a time such as 2026-12-01T09:30 (UTC)", b.text)
		}
		*b.into = t
	}
	return req, nil
}

// parseRefs reads "order_id=o-1 customer=c-7" (spaces or commas between).
func parseRefs(s string) (map[string]string, error) {
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ',' || r == '\t' || r == '\n' })
	if len(fields) == 0 {
		return nil, nil
	}
	refs := map[string]string{}
	for _, f := range fields {
		name, value, ok := strings.Cut(f, "=")
		if !ok || name == "" || value == "" {
			return nil, opjournal.Errorf(opjournal.CodeInvalidArgument, "refs", "%q is not name=value", f)
		}
		if _, dup := refs[name]; dup {
			return nil, opjournal.Errorf(opjournal.CodeInvalidArgument, "refs", "%s is given twice", name)
		}
		refs[name] = value
	}
	if err := opjournal.CheckRefs(refs); err != nil {
		return nil, err
	}
	return refs, nil
}

// describe says in words what the filter selects.
func (f filter) describe() string {
	q, _ := queueByID(f.Queue)
	parts := []string{q.Label}
	if f.Action != "" {
		parts = append(parts, "action "+f.Action)
	}
	if f.Status != "" {
		parts = append(parts, "status "+f.Status)
	}
	if f.Refs != "" {
		parts = append(parts, "refs "+f.Refs)
	}
	if f.KeyPrefix != "" {
		parts = append(parts, fmt.Sprintf("key starting with %q", f.KeyPrefix))
	}
	if f.After != "" {
		parts = append(parts, "changed at or after "+f.After+" UTC")
	}
	if f.Before != "" {
		parts = append(parts, "changed before "+f.Before+" UTC")
	}
	return strings.Join(parts, ", ")
}
