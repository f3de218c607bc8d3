package gateway

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/client"
)

// Budgets at both doors. An action's policy may cap what its operations
// add up to within a rolling window (budgets:). A registration that would
// pass a budget whose on_exceed is reject is refused by the journal
// (BUDGET_EXCEEDED, client.BudgetExceeded): nothing is registered, so the
// gateway sends nothing upstream and stores nothing, and the same request
// again is simply asked again (refused while the budget is full, sent
// once when it fits). The doors answer HTTP 429 budget-exceeded with
// Retry-After, or the MCP tool error budget_exceeded. Both name the
// budget, its limit, what is used and its window, never a value of the
// request: the journal's refusal carries none. (A budget whose on_exceed
// is approval holds the request for a person instead: approval.go.)

// budgetNeverFitsRetry is the Retry-After of a request that alone is over
// a budget's limit when the journal did not say the budget's window.
const budgetNeverFitsRetry = time.Hour

// budgetOf is the refusal's budget (never nil: an empty one when the
// journal named none).
func budgetOf(out client.Outcome) *client.BudgetRefusal {
	if out.Budget == nil {
		return &client.BudgetRefusal{}
	}
	return out.Budget
}

// writeBudgetExceeded answers a request a budget refused: 429 with the
// budget's name, limit, use and window, and Retry-After. The journal's
// hint (whole seconds, at least 1) is when enough of the budget frees up
// for this request, if nothing else takes it meanwhile. A request that
// alone is over the limit never fits: it gets the budget's window as
// Retry-After all the same (a client that retries 429s by itself, as
// most HTTP clients do, would otherwise retry at once, or not know when),
// and never_fits and the detail say that waiting will not help.
func writeBudgetExceeded(w http.ResponseWriter, log *slog.Logger, key string, out client.Outcome) {
	b := budgetOf(out)
	limit, used := b.Limit, b.Used
	p := problem{Type: problemBase + probBudgetExceeded, Title: "Budget exceeded", Status: http.StatusTooManyRequests, OperationKey: key,
		Budget: b.Budget, Limit: &limit, Used: &used, WindowSeconds: int64(b.Window / time.Second)}
	retry := out.RetryAfter
	if retry > 0 {
		retry = max(retry, time.Second)
		p.Detail = fmt.Sprintf("this request would pass the budget %q (%d of its limit %d used in the last %s), which caps what this caller may do, so it was NOT sent and nothing was registered. "+
			"It may fit after Retry-After, unless other requests use the budget meanwhile: retry then with the same key. "+
			"Do not split it into smaller requests or change it to get around the limit", b.Budget, b.Used, b.Limit, opjournal.WindowWords(b.Window))
	} else {
		retry = b.Window
		if retry <= 0 {
			retry = budgetNeverFitsRetry
		}
		p.NeverFits = true
		p.Detail = fmt.Sprintf("this request alone is over the limit of the budget %q (%d per %s), so it was NOT sent and nothing was registered, and it will never fit under this budget, however long you wait. "+
			"Retry-After is the budget's window only so that a client that retries by itself does not loop: do not retry this request, "+
			"and do not split it into smaller requests to get around the limit", b.Budget, b.Limit, opjournal.WindowWords(b.Window))
	}
	log.Info("refused by a budget", "budget", b.Budget, "used", b.Used, "limit", b.Limit, "never_fits", p.NeverFits)
	writeProblemDoc(w, p, retry)
}

// budgetExceededText is the text the model reads (protocol/testdata/model_texts.json:
// budget_exceeded): the tool's name, the budget's name, used, limit and
// window (windowWords), and retryWords.
const budgetExceededText = "This call of %s was NOT made: it would pass the limit of the budget %s (%d of %d used in the last %s), which a person set to cap what you may do. " +
	"Nothing was sent. Do not split it into smaller calls, rephrase it or change its arguments to get around the limit: that is exactly what the limit forbids. " +
	"Tell the user the limit was reached.%s"

// budgetToolError is the tool error of a call a budget refused, with
// _meta["opjournal/operation"].budget naming the budget for a client (its
// name, limit, used, window_seconds, and retry_after_seconds when it may
// fit later).
func budgetToolError(log *slog.Logger, tool, key string, out client.Outcome) *mcp.CallToolResult {
	b := budgetOf(out)
	log.Info("refused by a budget", "budget", b.Budget, "used", b.Used, "limit", b.Limit, "never_fits", out.RetryAfter <= 0)
	res := withMeta(toolError(budgetExceededText, tool, b.Budget, b.Used, b.Limit, opjournal.WindowWords(b.Window), retryWords(out.RetryAfter)), key, false, outcomeOf(out.Kind))
	about := map[string]any{"name": b.Budget, "limit": b.Limit, "used": b.Used, "window_seconds": int64(b.Window / time.Second)}
	if out.RetryAfter > 0 {
		about["retry_after_seconds"] = wholeSeconds(out.RetryAfter)
	}
	res.Meta[MetaKey].(map[string]any)["budget"] = about
	return res
}

// retryWords is the model text's {retry}: when the call may fit again, or
// nothing when it never fits (the journal gave no hint).
func retryWords(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return fmt.Sprintf(" It may fit again in about %d seconds.", wholeSeconds(d))
}

// wholeSeconds is d in whole seconds, rounded up, at least 1.
func wholeSeconds(d time.Duration) int64 {
	return int64((max(d, time.Second) + time.Second - 1) / time.Second)
}
