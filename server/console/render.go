package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/opjournal/opjournal"
)

// pageNames are the templates; each is rendered inside layout.html.
var pageNames = []string{"signin", "queues", "operation", "confirm", "bulk", "done", "overview", "error", "approvals", "rejectmany", "budgets"}

func parseTemplates() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"ts":       formatTime,
		"age":      func(t, now time.Time) string { return formatAge(t, now) },
		"until":    func(t, now time.Time) string { return formatUntil(t, now) },
		"pretty":   prettyJSON,
		"opURL":    func(key string) string { return Prefix + "operation?key=" + url.QueryEscape(key) },
		"join":     strings.Join,
		"terminal": func(s opjournal.Status) bool { return s.Terminal() },
		"add":      func(a, b int) int { return a + b },
		"who":      who,
		"list":     func(s ...string) []string { return s },
		"dict": func(kv ...any) map[string]any {
			m := map[string]any{}
			for i := 0; i+1 < len(kv); i += 2 {
				m[kv[i].(string)] = kv[i+1]
			}
			return m
		},
	}
	pages := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// view is what layout.html renders around a page.
type view struct {
	Title   string
	Page    string
	Session *session
	Now     time.Time
	Data    any
	// Refresh, if > 0, reloads the page after that many seconds.
	Refresh int
}

// render writes one page with its status; rendering into a buffer first,
// so that a template error becomes a clean 500, never half a page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page string, s *session, data any) {
	c.renderView(w, r, status, &view{Page: page, Session: s, Data: data})
}

func (c *Console) renderView(w http.ResponseWriter, r *http.Request, status int, v *view) {
	v.Now = c.cfg.Now()
	if v.Title == "" {
		v.Title = pageTitles[v.Page]
	}
	var b bytes.Buffer
	if err := c.pages[v.Page].Execute(&b, v); err != nil {
		c.log.Error("console: rendering failed", "page", v.Page, "err", err)
		http.Error(w, "the console could not render this page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

var pageTitles = map[string]string{
	"signin": "Sign in", "queues": "Queues", "operation": "Operation", "confirm": "Confirm the decision",
	"bulk": "Decide for a selection", "done": "Decided", "overview": "Overview", "error": "Problem",
	"approvals": "Approvals", "rejectmany": "Reject a selection", "budgets": "Budgets",
}

// fail shows a problem page: what went wrong, in words, with its status.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, s *session, status int, msg string) {
	c.render(w, r, status, "error", s, map[string]any{"Status": status, "StatusText": http.StatusText(status), "Message": msg})
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// formatAge says how long ago t was, in the largest two units.
func formatAge(t, now time.Time) string {
	if t.IsZero() {
		return "—"
	}
	d := now.Sub(t)
	if d < 0 {
		return "in " + short(-d)
	}
	return short(d) + " ago"
}

func formatUntil(t, now time.Time) string {
	if t.IsZero() {
		return "now"
	}
	d := t.Sub(now)
	if d <= 0 {
		return "overdue by " + short(-d)
	}
	return "in " + short(d)
}

func short(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
}

// prettyJSON indents a stored JSON object for reading ("" for none).
func prettyJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return string(raw)
	}
	return b.String()
}

// who names a principal for people: its label with the id beside it
// ("alice-laptop (alice)"), the id alone when there is no label (an older
// record, or no authentication) or the two are the same.
func who(label, id string) string {
	if label == "" || label == id {
		return id
	}
	return label + " (" + id + ")"
}
