package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/protocol/policy"
)

// This file is the console's view of the budgets: the Budgets page (every
// counter of the tenant, as ListBudgets answers), and on an operation's
// page what it holds of each budget with the counter now (HeldBudgets).

// maxBudgetRows bounds the counters the Budgets page shows: a budget per
// principal and currency may have many scopes; the filters narrow it.
const maxBudgetRows = 1000

// maxFilterLen bounds a filter value the page takes at all: an action or
// budget name is far shorter, and a longer one is refused before any
// lookup, never echoed whole.
const maxFilterLen = 200

// MayListBudgets reports whether the session may read the budgets'
// counters: the roles of ListBudgets (reconciler, operator, admin), as
// the API checks them. The counters span the tenant's principals, so an
// agent's token (which cannot sign in anyway) never reads them here.
func (s *session) MayListBudgets() bool { return s.Principal.Allowed("ListBudgets") }

// scopePart is one dimension of a budget's scope, for people: the
// dimension (principal, action, payload.NAME, refs.NAME) and its value as
// text (a string unquoted, any other JSON value as written).
type scopePart struct {
	Name, Value string
}

// maxScopeValue bounds a scope value as shown (a payload member may be
// long); the rest is cut with an ellipsis.
const maxScopeValue = 120

// scopeOf reads a counter's scope, the canonical JSON object of its
// values, in the order of the budget's per (then any other member in name
// order). nil is the tenant as a whole ("{}" or ""); a scope that is not
// an object (never written by the journal) is shown as one raw part.
func scopeOf(scope string, per []string) []scopePart {
	if scope == "" || scope == "{}" {
		return nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(scope), &obj); err != nil {
		return []scopePart{{Name: "scope", Value: cut(scope, maxScopeValue)}}
	}
	names := make([]string, 0, len(obj))
	for _, p := range per {
		if _, ok := obj[p]; ok {
			names = append(names, p)
		}
	}
	var rest []string
	for name := range obj {
		if !slices.Contains(names, name) {
			rest = append(rest, name)
		}
	}
	slices.Sort(rest)
	out := make([]scopePart, 0, len(obj))
	for _, name := range append(names, rest...) {
		raw := bytes.TrimSpace(obj[name])
		v := string(raw)
		var s string
		if len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
			v = s
		}
		out = append(out, scopePart{Name: name, Value: cut(v, maxScopeValue)})
	}
	return out
}

// cut shortens s to at most n characters, marking the cut.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// counter is one budget counter as the console shows it.
type counter struct {
	Action, Budget string
	// Scope is the counter's scope for people; nil for the whole tenant,
	// or, with Unused, for a budget in which nothing counts in any scope.
	Scope  []scopePart
	Unused bool
	// Counts says what the budget adds up: "count" or "sum of MEMBER".
	Counts string
	// Per lists the scope's dimensions ("the whole tenant" when none).
	Per                                      string
	Limit, Used, ReservedUnknown, Operations int64
	Window                                   string
	OnExceed                                 string
	// Percent is Used of Limit in words ("60%", "<1%", "110%").
	Percent string
	// Full: nothing more fits (Used >= Limit); Over: a person admitted
	// operations past the limit (Used > Limit).
	Full, Over bool
	// Bar is Used of Limit drawn as a bar.
	Bar template.HTML
}

// counterOf converts the journal's counter.
func counterOf(b journal.Budget) counter {
	c := counter{Action: b.Action, Budget: b.Budget, Limit: b.Limit, Used: b.Used, ReservedUnknown: b.ReservedUnknown,
		Operations: b.Operations, Window: opjournal.WindowWords(b.Window), Full: b.Limit > 0 && b.Used >= b.Limit, Over: b.Used > b.Limit}
	var per []string
	if p := b.Policy; p != nil {
		per = p.Per
		c.OnExceed = p.OnExceed
		if p.Count {
			c.Counts = "count of operations"
		} else {
			c.Counts = "sum of " + p.Sum
		}
	}
	c.Scope = scopeOf(b.Scope, per)
	// ListBudgets lists a budget in which nothing counts once, with no
	// scope at all: not the tenant's "{}" scope.
	c.Unused = b.Scope == "" && len(per) > 0
	if len(per) == 0 {
		c.Per = "the whole tenant"
	} else {
		c.Per = "per " + strings.Join(per, ", ")
	}
	c.Percent = opjournal.UsePercent(b.Used, b.Limit)
	c.Bar = usageBar(b.Used, b.ReservedUnknown, b.Limit)
	return c
}

// The bar's fills: the Okabe-Ito colours of the charts (chart.go), so the
// two parts are told apart with the common colour-vision deficiencies;
// the figures beside it say the same in text.
const (
	barSettled = "#0072B2" // used by operations whose outcome is known
	barUnknown = "#E69F00" // reserved by operations whose outcome is unknown
	barOver    = "#a4161a" // the outline of a counter past its limit
)

// usageBar draws used of limit as a horizontal bar in SVG, server-side
// (no script; presentation attributes only, as the CSP forbids inline
// styles): the part whose outcome is known, then the part reserved by
// operations whose outcome is unknown, over the limit's width; a counter
// past its limit (admitted by a person) is full, outlined in red. It is
// an image with its figures in its label.
func usageBar(used, unknown, limit int64) template.HTML {
	const w, h = 200.0, 14.0
	frac := func(v int64) float64 {
		if limit <= 0 || v <= 0 {
			return 0
		}
		return min(1, float64(v)/float64(limit))
	}
	known := max(0, used-unknown)
	kw := w * frac(known)
	uw := min(w-kw, w*frac(unknown))
	label := fmt.Sprintf("%d of %d used (%s); %d of it reserved by operations whose outcome is not yet known", used, limit, opjournal.UsePercent(used, limit), unknown)
	if used > limit {
		label += "; past the limit"
	}
	stroke := "#7a8391"
	if used > limit {
		stroke = barOver
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="bar" viewBox="0 0 %.0f %.0f" preserveAspectRatio="none" role="img" aria-label="%s" xmlns="http://www.w3.org/2000/svg">`, w, h, html.EscapeString(label))
	fmt.Fprintf(&b, `<title>%s</title>`, html.EscapeString(label))
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%.0f" height="%.0f" fill="#f3f5f8"/>`, w, h)
	if kw > 0 {
		fmt.Fprintf(&b, `<rect class="known" x="0" y="0" width="%.2f" height="%.0f" fill="%s"/>`, kw, h, barSettled)
	}
	if uw > 0 {
		fmt.Fprintf(&b, `<rect class="unknown" x="%.2f" y="0" width="%.2f" height="%.0f" fill="%s"/>`, kw, uw, h, barUnknown)
	}
	fmt.Fprintf(&b, `<rect x="0.5" y="0.5" width="%.0f" height="%.0f" fill="none" stroke="%s" stroke-width="1"/>`, w-1, h-1, stroke)
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // every text in it is escaped above
}

// budgetFilter is the Budgets page's selection, from its query.
type budgetFilter struct {
	Action, Budget string
}

// check refuses a filter that names no action or budget of the policy,
// naming the query parameter; the value is quoted, cut short.
func (f budgetFilter) check(pol *policy.Policy) error {
	for _, p := range []struct{ name, value string }{{"action", f.Action}, {"budget", f.Budget}} {
		if len(p.value) > maxFilterLen {
			return opjournal.Errorf(opjournal.CodeInvalidArgument, p.name, "is %d bytes; no %s name is longer than %d", len(p.value), p.name, maxFilterLen)
		}
	}
	if f.Action != "" && !slices.Contains(pol.Names(), f.Action) {
		return opjournal.Errorf(opjournal.CodeInvalidArgument, "action", "%q is not an action of the policy (%s)", cut(f.Action, 64), strings.Join(pol.Names(), ", "))
	}
	if f.Budget == "" {
		return nil
	}
	for _, name := range pol.Names() {
		if f.Action != "" && name != f.Action {
			continue
		}
		if a, ok := pol.Action(name); ok && a.Budget(f.Budget) != nil {
			return nil
		}
	}
	where := "the policy"
	if f.Action != "" {
		where = "action " + f.Action
	}
	return opjournal.Errorf(opjournal.CodeInvalidArgument, "budget", "%q is not a budget of %s", cut(f.Budget, 64), where)
}

// Query is the filter as a URL query, for links: already encoded.
func (f budgetFilter) Query() template.URL {
	var parts []string
	if f.Action != "" {
		parts = append(parts, "action="+url.QueryEscape(f.Action))
	}
	if f.Budget != "" {
		parts = append(parts, "budget="+url.QueryEscape(f.Budget))
	}
	return template.URL(strings.Join(parts, "&")) // #nosec: each value is query-escaped
}

// policyBudgetNames are the names of the policy's budgets, once each, in
// name order (the filter's choices).
func policyBudgetNames(pol *policy.Policy) []string {
	var out []string
	for _, name := range pol.Names() {
		a, _ := pol.Action(name)
		for _, b := range a.Budgets {
			if !slices.Contains(out, b.Name) {
				out = append(out, b.Name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// budgets is the Budgets page: the tenant's budget counters, per action,
// budget and scope, with the filter's selection. Reconcilers, operators
// and admins (ListBudgets' roles); any other principal gets 403 and
// nothing of the counters.
func (c *Console) budgets(w http.ResponseWriter, r *http.Request, s *session) {
	if !s.MayListBudgets() {
		c.log.Warn("console: budgets refused: role", "principal", s.Principal.ID, "label", s.Principal.Name, "tenant", s.Principal.Tenant)
		c.fail(w, r, s, http.StatusForbidden, fmt.Sprintf("%s (roles %v) may not read the budgets: that needs a reconciler, operator or admin token.", s.Principal.Name, s.Principal.Roles))
		return
	}
	q := r.URL.Query()
	f := budgetFilter{Action: q.Get("action"), Budget: q.Get("budget")}
	pol := c.svc.Policy()
	refresh := refreshSeconds
	if q.Get("refresh") == "off" {
		refresh = 0
	}
	names := policyBudgetNames(pol)
	data := map[string]any{"Filter": f, "Actions": pol.Names(), "BudgetNames": names, "Refresh": refresh, "Max": maxBudgetRows, "Defined": len(names) > 0}
	status := http.StatusOK
	if err := f.check(pol); err != nil {
		// The filter is not echoed into the form: only the policy's
		// names are offered, and the problem quotes the value, cut.
		data["Filter"] = budgetFilter{}
		data["Problem"], status = c.message(r, err), c.status(err)
	} else {
		rows, err := c.svc.ListBudgets(r.Context(), s.Principal.Tenant, journal.BudgetFilter{Action: f.Action, Budget: f.Budget})
		if err != nil {
			data["Problem"], status = c.message(r, err), c.status(err)
		} else {
			counters := make([]counter, 0, min(len(rows), maxBudgetRows))
			for _, b := range rows {
				if len(counters) == maxBudgetRows {
					data["More"] = len(rows)
					break
				}
				counters = append(counters, counterOf(b))
			}
			data["Counters"] = counters
		}
	}
	c.renderView(w, r, status, &view{Page: "budgets", Session: s, Data: data, Refresh: refresh})
}

// heldBudget is one budget an operation holds, for its page: the hold,
// whether it counts now and why, and the counter now (nil when the
// session may not read counters or the policy no longer has the budget).
type heldBudget struct {
	Hold  opjournal.BudgetHold
	Scope []scopePart
	// Counts: the hold is part of the counter's Used now; Why says so in
	// words either way.
	Counts  bool
	Why     string
	Counter *counter
}

// heldBudgetsOf returns what op holds of its budgets, with each counter
// now when withCounters (the session may list budgets). A counter that
// cannot be read leaves the holds shown and says so in note.
func (c *Console) heldBudgetsOf(r *http.Request, s *session, op *opjournal.Operation, withCounters bool) (held []heldBudget, note string) {
	if len(op.Budgets) == 0 {
		return nil, ""
	}
	act, _ := c.svc.Policy().Action(op.Action)
	var usage []journal.Budget
	if withCounters {
		var err error
		if usage, err = c.svc.HeldBudgets(r.Context(), s.Principal.Tenant, op); err != nil {
			note = "The counters could not be read now: " + c.message(r, err)
		}
	}
	now := c.cfg.Now()
	for _, h := range op.Budgets {
		hb := heldBudget{Hold: h}
		var bp *policy.BudgetPolicy
		if act != nil {
			bp = act.Budget(h.Budget)
		}
		var per []string
		if bp != nil {
			per = bp.Per
		}
		hb.Scope = scopeOf(h.Scope, per)
		hb.Counts, hb.Why = holdState(op, h, bp, now)
		for _, u := range usage {
			if u.Budget == h.Budget && u.Scope == h.Scope {
				ct := counterOf(u)
				hb.Counter = &ct
				break
			}
		}
		held = append(held, hb)
	}
	return held, note
}

// holdState says whether a hold counts in its budget now, and why, in the
// journal's terms (protocol.HoldCounts, and the window over the
// registration time).
func holdState(op *opjournal.Operation, h opjournal.BudgetHold, bp *policy.BudgetPolicy, now time.Time) (bool, string) {
	if !protocol.HoldCounts(op, h) {
		if h.OverLimit && op.Status == statusAwaitingApproval {
			return false, "not counted yet: it is over the limit and counts only once a person approves it"
		}
		return false, "not counted: the operation failed finally (a definitive failure or a rejection gives back what it held)"
	}
	if bp == nil {
		return true, "held (the policy no longer has this budget)"
	}
	until := op.CreatedAt.Add(bp.Window)
	if !now.Before(until) {
		return false, "no longer counted: the budget's window passed its registration at " + formatTime(until)
	}
	return true, "counts until " + formatTime(until) + " (the window after its registration)"
}
