// Package ops is the operators' command line, `opjournal ops`: it lists
// the review queue, shows an operation with its history, and records an
// operator's decision (resolve) or a release for retry. It talks to the
// journal over gRPC only, like every other client; every change it makes is
// audited in the operation's history with the actor and reason given.
package ops

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/opjournal/opjournal/gen/opjournal/v1"
)

// Usage describes the subcommands.
const Usage = `Usage:
  opjournal ops list    [--all | --status S[,S]] [--due] [--action A] [--ref NAME=VALUE]...
                        [--parent KEY] [--limit N] [--json]
                        (default: the review queue, operations with needs_review;
                        --ref finds an order's operations: all given refs must match)
  opjournal ops show    KEY [--json]
  opjournal ops resolve KEY (--succeeded --external-id ID | --failed-final [--error-code C])
                        --reason WHY [--actor WHO]
                        (a non-terminal operation that is unknown or under review)
  opjournal ops acknowledge KEY --reason WHY [--actor WHO]
                        (end the review of a terminal one, e.g. a duplicate effect:
                        its status never changes)
  opjournal ops release KEY --reason WHY [--actor WHO] [--attempt N]

With --auth-file on the server, the history records the token's name as the
actor; --actor is kept beside it as what you say you act for. Without
authentication --actor is required.

Common flags (before the subcommand): --journal-addr (OPJOURNAL_JOURNAL_ADDR), --timeout.
`

// ErrUsage reports a malformed command line; the message says what is wrong.
var ErrUsage = errors.New("usage")

func usageErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUsage, fmt.Sprintf(format, args...))
}

// Run executes one ops subcommand (args[0]) against the journal, writing
// its output to w. It returns an error wrapping ErrUsage for a malformed
// command line, and the journal's error (a gRPC status) otherwise.
func Run(ctx context.Context, c pb.JournalServiceClient, args []string, w io.Writer) error {
	if len(args) == 0 {
		return usageErr("missing subcommand (list, show, resolve, acknowledge, release)")
	}
	switch args[0] {
	case "list":
		return list(ctx, c, args[1:], w)
	case "show":
		return show(ctx, c, args[1:], w)
	case "resolve":
		return resolve(ctx, c, args[1:], w)
	case "acknowledge":
		return acknowledge(ctx, c, args[1:], w)
	case "release":
		return release(ctx, c, args[1:], w)
	}
	return usageErr("unknown subcommand %q (list, show, resolve, acknowledge, release)", args[0])
}

func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("ops "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parseWithKey parses flags that may come before or after the one
// positional KEY argument.
func parseWithKey(fs *flag.FlagSet, args []string) (string, error) {
	var key string
	for {
		if err := fs.Parse(args); err != nil {
			return "", usageErr("%v", err)
		}
		if fs.NArg() == 0 {
			break
		}
		if key != "" {
			return "", usageErr("one operation key expected, got %q and %q", key, fs.Arg(0))
		}
		key, args = fs.Arg(0), fs.Args()[1:]
	}
	if key == "" {
		return "", usageErr("missing operation key")
	}
	return key, nil
}

var statusNames = map[string]pb.Status{
	"pending": pb.Status_STATUS_PENDING, "in_progress": pb.Status_STATUS_IN_PROGRESS,
	"unknown": pb.Status_STATUS_UNKNOWN, "succeeded": pb.Status_STATUS_SUCCEEDED,
	"failed_final": pb.Status_STATUS_FAILED_FINAL,
}

func list(ctx context.Context, c pb.JournalServiceClient, args []string, w io.Writer) error {
	fs := newFlags("list")
	all := fs.Bool("all", false, "every operation, not only the review queue")
	statuses := fs.String("status", "", "comma-separated statuses")
	due := fs.Bool("due", false, "only operations due for a reconciliation check")
	action := fs.String("action", "", "only this action")
	refs := refFlag{}
	fs.Var(refs, "ref", "only operations with this business reference, NAME=VALUE (repeat: all must match)")
	parent := fs.String("parent", "", "only the children of this operation (side effects registered with its key as parent_key)")
	limit := fs.Int("limit", 50, "at most this many")
	asJSON := fs.Bool("json", false, "one JSON object per line")
	if err := fs.Parse(args); err != nil {
		return usageErr("%v", err)
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected arguments %v", fs.Args())
	}
	if *limit < 1 {
		return usageErr("--limit must be at least 1")
	}
	req := &pb.ListOperationsRequest{ActionType: *action, DueForCheck: *due, ParentKey: *parent}
	if len(refs) > 0 {
		req.Refs = refs
	}
	if *statuses != "" {
		for _, s := range strings.Split(*statuses, ",") {
			st, ok := statusNames[strings.TrimSpace(s)]
			if !ok {
				return usageErr("unknown status %q (pending, in_progress, unknown, succeeded, failed_final)", s)
			}
			req.Statuses = append(req.Statuses, st)
		}
	}
	if !*all && *statuses == "" && !*due && *action == "" && len(refs) == 0 && *parent == "" {
		req.NeedsReview = proto.Bool(true)
	}
	var ops []*pb.Operation
	for len(ops) < *limit {
		req.PageSize = int32(min(*limit-len(ops), 1000))
		res, err := c.ListOperations(ctx, req)
		if err != nil {
			return err
		}
		ops = append(ops, res.GetOperations()...)
		if res.GetNextPageToken() == "" {
			break
		}
		req.PageToken = res.GetNextPageToken()
	}
	if *asJSON {
		for _, op := range ops {
			if err := writeJSON(w, op); err != nil {
				return err
			}
		}
		return nil
	}
	if len(ops) == 0 {
		_, err := fmt.Fprintln(w, "no operations")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tACTION\tSTATUS\tATTEMPTS\tCHECKS\tUPDATED\tREVIEW")
	for _, op := range ops {
		review := ""
		if op.GetNeedsReview() {
			review = op.GetReviewReason()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", op.GetOperationKey(), op.GetActionType(), statusName(op.GetStatus()),
			op.GetAttemptCount(), op.GetCheckCount(), ts(op.GetUpdatedAt()), review)
	}
	return tw.Flush()
}

func show(ctx context.Context, c pb.JournalServiceClient, args []string, w io.Writer) error {
	fs := newFlags("show")
	asJSON := fs.Bool("json", false, "the operation and its events as JSON")
	key, err := parseWithKey(fs, args)
	if err != nil {
		return err
	}
	op, err := c.Lookup(ctx, &pb.LookupRequest{OperationKey: key})
	if err != nil {
		return err
	}
	evs, err := history(ctx, c, key)
	if err != nil {
		return err
	}
	if *asJSON {
		if err := writeJSON(w, op.GetOperation()); err != nil {
			return err
		}
		for _, e := range evs {
			if err := writeJSON(w, e); err != nil {
				return err
			}
		}
		return nil
	}
	o := op.GetOperation()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, v)
		}
	}
	row("operation_key", o.GetOperationKey())
	row("action_type", o.GetActionType())
	row("status", statusName(o.GetStatus()))
	row("attempt_count", fmt.Sprint(o.GetAttemptCount()))
	row("request_hash", o.GetRequestHash())
	if refs := o.GetRefs(); len(refs) > 0 {
		var parts []string
		for _, name := range slices.Sorted(maps.Keys(refs)) {
			parts = append(parts, name+"="+refs[name])
		}
		row("refs", strings.Join(parts, " "))
	}
	row("parent_key", o.GetParentKey())
	row("external_id", o.GetExternalId())
	if ids := o.GetDuplicateExternalIds(); len(ids) > 0 {
		row("duplicate_external_ids", fmt.Sprintf("%s (%d reports of other effects)", strings.Join(ids, ", "), o.GetDuplicateReports()))
	}
	row("error_code", o.GetErrorCode())
	row("lease_owner", o.GetLeaseOwner())
	row("lease_until", ts(o.GetLeaseUntil()))
	row("first_attempt_at", ts(o.GetFirstAttemptAt()))
	row("unknown_since", ts(o.GetUnknownSince()))
	if o.GetCheckCount() > 0 {
		row("checks", fmt.Sprintf("%d (last %s, next %s)", o.GetCheckCount(), ts(o.GetLastCheckedAt()), ts(o.GetNextCheckAt())))
	}
	if o.GetNeedsReview() {
		row("needs_review", "yes: "+o.GetReviewReason())
	} else if o.GetReviewReason() != "" {
		row("review_reason", o.GetReviewReason()+" (resolved)")
	}
	row("created_at", ts(o.GetCreatedAt()))
	row("updated_at", ts(o.GetUpdatedAt()))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nhistory:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tFROM\tTO\tATTEMPT\tACTOR\tREASON")
	for _, e := range evs {
		reason := e.GetReason()
		if e.GetExternalId() != "" {
			reason += " [" + e.GetExternalId() + "]"
		}
		from := statusName(e.GetFromStatus())
		if from == "" {
			from = "-"
		}
		actor := e.GetActor()
		if st := e.GetStatedActor(); st != "" && st != actor {
			actor += " (says: " + st + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", ts(e.GetAt()), from, statusName(e.GetToStatus()), e.GetAttempt(), actor, reason)
	}
	return tw.Flush()
}

// refFlag collects --ref NAME=VALUE flags.
type refFlag map[string]string

func (r refFlag) String() string { return "" }

func (r refFlag) Set(v string) error {
	name, value, ok := strings.Cut(v, "=")
	if !ok || name == "" || value == "" {
		return errors.New("want NAME=VALUE, e.g. --ref order_id=817")
	}
	if _, dup := r[name]; dup {
		return fmt.Errorf("%s is given twice", name)
	}
	r[name] = value
	return nil
}

// history reads an operation's whole history, page by page.
func history(ctx context.Context, c pb.JournalServiceClient, key string) ([]*pb.Event, error) {
	var evs []*pb.Event
	token := ""
	for {
		resp, err := c.ListEvents(ctx, &pb.ListEventsRequest{OperationKey: key, PageSize: 1000, PageToken: token})
		if err != nil {
			return nil, err
		}
		evs = append(evs, resp.GetEvents()...)
		if token = resp.GetNextPageToken(); token == "" {
			return evs, nil
		}
	}
}

func resolve(ctx context.Context, c pb.JournalServiceClient, args []string, w io.Writer) error {
	fs := newFlags("resolve")
	ok := fs.Bool("succeeded", false, "the effect happened")
	failed := fs.Bool("failed-final", false, "no effect happened; never retry")
	extID := fs.String("external-id", "", "with --succeeded: the provider's id of the effect")
	code := fs.String("error-code", "", "with --failed-final: why")
	actor := fs.String("actor", "", "who you act for (recorded as stated actor; required without authentication)")
	reason := fs.String("reason", "", "why (required)")
	key, err := parseWithKey(fs, args)
	if err != nil {
		return err
	}
	req := &pb.ResolveRequest{OperationKey: key, ExternalId: *extID, ErrorCode: *code, Actor: *actor, Reason: *reason}
	switch {
	case *ok == *failed:
		return usageErr("give exactly one of --succeeded or --failed-final")
	case *ok:
		req.Resolution = pb.Resolution_RESOLUTION_SUCCEEDED
	default:
		req.Resolution = pb.Resolution_RESOLUTION_FAILED_FINAL
	}
	if *reason == "" {
		return usageErr("--reason is required: the decision is audited")
	}
	res, err := c.Resolve(ctx, req)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s resolved as %s\n", key, statusName(res.GetOperation().GetStatus()))
	return err
}

func acknowledge(ctx context.Context, c pb.JournalServiceClient, args []string, w io.Writer) error {
	fs := newFlags("acknowledge")
	actor := fs.String("actor", "", "who you act for (recorded as stated actor; required without authentication)")
	reason := fs.String("reason", "", "why (required): what was done about it")
	key, err := parseWithKey(fs, args)
	if err != nil {
		return err
	}
	if *reason == "" {
		return usageErr("--reason is required: the decision is audited")
	}
	res, err := c.Acknowledge(ctx, &pb.AcknowledgeRequest{OperationKey: key, Actor: *actor, Reason: *reason})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s acknowledged: still %s, no longer under review\n", key, statusName(res.GetOperation().GetStatus()))
	return err
}

func release(ctx context.Context, c pb.JournalServiceClient, args []string, w io.Writer) error {
	fs := newFlags("release")
	actor := fs.String("actor", "", "who you act for (recorded as stated actor; required without authentication)")
	reason := fs.String("reason", "", "why: what the provider showed (required)")
	attempt := fs.Int("attempt", 0, "the latest attempt (default: looked up)")
	key, err := parseWithKey(fs, args)
	if err != nil {
		return err
	}
	if *reason == "" {
		return usageErr("--reason is required: the decision is audited")
	}
	if *attempt == 0 {
		op, err := c.Lookup(ctx, &pb.LookupRequest{OperationKey: key})
		if err != nil {
			return err
		}
		*attempt = int(op.GetOperation().GetAttemptCount())
	}
	if _, err := c.ReleaseForRetry(ctx, &pb.ReleaseForRetryRequest{OperationKey: key, Attempt: int32(*attempt), Actor: *actor, Reason: *reason}); err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s released for retry (attempt %d was absent at the provider)\n", key, *attempt)
	return err
}

func statusName(s pb.Status) string {
	if s == pb.Status_STATUS_UNSPECIFIED {
		return ""
	}
	return strings.ToLower(strings.TrimPrefix(s.String(), "STATUS_"))
}

func ts(t *timestamppb.Timestamp) string {
	if t == nil {
		return ""
	}
	return t.AsTime().UTC().Format(time.RFC3339)
}

func writeJSON(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return err
	}
	var compact json.RawMessage = b
	out, err := json.Marshal(compact)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", out)
	return err
}
