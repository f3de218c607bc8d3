package webhook

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"strings"
	"time"
)

// EventAwaitingApproval is the type of the one event the journal sends: an
// operation entered awaiting_approval and a person must decide.
const EventAwaitingApproval = "operation.awaiting_approval"

// Notification is one operation awaiting approval, as a webhook tells it.
// It carries identifiers and the approval's terms only, never the
// payload's or the refs' values: receivers may log a webhook body, and
// people open the console (which checks who they are) to see the request.
type Notification struct {
	// URL is where to POST it: the action's approval.notify.
	URL string
	// Tenant, OperationKey, ActionType and RequestHash identify the
	// operation and the exact request a person is asked to approve.
	Tenant       string
	OperationKey string
	ActionType   string
	RequestHash  string
	// RequestedBy is the principal id of who registered it ("" without
	// authentication); RequestedByLabel that credential's label, for
	// people to read.
	RequestedBy, RequestedByLabel string
	// Deadline is when the question times out; zero for never.
	Deadline time.Time
	// TwoPerson: two distinct principals must approve.
	TwoPerson bool
	// At is when the operation entered awaiting_approval (its creation):
	// the event's timestamp, the same in every re-send.
	At time.Time
}

// MessageID is the webhook-id of n: "msg_" and the hex SHA-256 of its
// tenant, key and request hash. It is the same for every delivery and
// re-send of one question (also from another replica, or after a restart),
// so a receiver that deduplicates by webhook-id, as the specification
// asks, acts on it once. It holds no '.', which the signed content uses as
// its separator.
func (n Notification) MessageID() string {
	h := sha256.New()
	for _, part := range []string{n.Tenant, n.OperationKey, n.RequestHash} {
		// Length-free separation is safe: none of the three may hold a NUL.
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return "msg_" + hex.EncodeToString(h.Sum(nil))
}

// body is the JSON of the event, the Standard Webhooks envelope
// {type, timestamp, data}.
type body struct {
	Type      string `json:"type"`
	Timestamp string `json:"timestamp"`
	Data      data   `json:"data"`
}

// data is the event's data; see Notification for what each member is.
type data struct {
	Tenant       string `json:"tenant"`
	OperationKey string `json:"operation_key"`
	ActionType   string `json:"action_type"`
	RequestHash  string `json:"request_hash"`
	RequestedBy  string `json:"requested_by"`
	// RequestedByLabel is left out without one (no authentication).
	RequestedByLabel string  `json:"requested_by_label,omitempty"`
	Deadline         *string `json:"deadline"` // null for never
	TwoPerson        bool    `json:"two_person"`
	ConsoleURL       string  `json:"console_url,omitempty"`
}

// Body returns the JSON body of n. consoleBase, if not empty, is the
// server's public URL (opjournal serve --public-url): the body then links
// to the operation's page in the console.
func (n Notification) Body(consoleBase string) []byte {
	d := data{Tenant: n.Tenant, OperationKey: n.OperationKey, ActionType: n.ActionType, RequestHash: n.RequestHash,
		RequestedBy: n.RequestedBy, RequestedByLabel: n.RequestedByLabel, TwoPerson: n.TwoPerson, ConsoleURL: ConsoleURL(consoleBase, n.OperationKey)}
	if !n.Deadline.IsZero() {
		s := n.Deadline.UTC().Format(time.RFC3339)
		d.Deadline = &s
	}
	b, err := json.Marshal(body{Type: EventAwaitingApproval, Timestamp: n.At.UTC().Format(time.RFC3339), Data: d})
	if err != nil {
		panic("webhook: a body of strings and a bool must encode: " + err.Error())
	}
	return b
}

// ConsoleURL is the console's page of an operation under the server's
// public URL, "" without one. The key is query-escaped, so no key changes
// the link's host or path.
func ConsoleURL(publicURL, key string) string {
	if publicURL == "" {
		return ""
	}
	return strings.TrimSuffix(publicURL, "/") + "/console/operation?key=" + url.QueryEscape(key)
}
