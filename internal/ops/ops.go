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
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/opjournal/opjournal/internal/cli"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// Usage describes the subcommands.
const Usage = `Usage:
  opjournal ops list    [--all | --status S[,S]] [--due] [--action A] [--ref NAME=VALUE]...
                        [--parent KEY] [--limit N] [-o json|table]
                        (default: the review queue, operations with needs_review;
                        --ref finds an order's operations: all given refs must match)
  opjournal ops show    KEY [-o json|table]
  opjournal ops resolve KEY (--succeeded --external-id ID | --failed-final [--error-code C])
                        --reason WHY [--actor WHO]
                        (a non-terminal operation that is unknown or under review)
  opjournal ops acknowledge KEY --reason WHY [--actor WHO]
                        (end the review of a terminal one, e.g. a duplicate effect:
                        its status never changes)
  opjournal ops release KEY --reason WHY [--actor WHO] [--attempt N]
  opjournal ops note    KEY TEXT [--actor WHO]
  opjournal ops approve KEY --hash H --reason WHY [--actor WHO]
  opjournal ops reject  KEY --hash H --reason WHY [--error-code C] [--actor WHO]
                        (an operation awaiting approval; H is the request_hash you
                        checked: ops list --status awaiting_approval, ops show)

With --auth-file on the server, the history records the token's name as the
actor; --actor is kept beside it as what you say you act for. Without
authentication --actor is the actor; without it the decision is recorded as
local-admin, the journal's name for an unauthenticated caller (WhoAmI), as on
the console.

Common flags (anywhere on the line): --journal-addr (OPJOURNAL_JOURNAL_ADDR),
--token-file, --tls-ca, --timeout. "opjournal ops SUBCOMMAND --help" for each.
`

// ErrUsage reports a malformed command line; the message says what is wrong.
var ErrUsage = errors.New("usage")

func usageErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUsage, fmt.Sprintf(format, args...))
}

// Connect returns the journal client a subcommand calls, and a function
// that releases it. It is called once the command line is known to be
// well formed.
type Connect func(ctx context.Context) (pb.JournalServiceClient, func(), error)

// subcommands lists the names, for messages.
const subcommands = "list, show, resolve, acknowledge, release, note, approve, reject"

// NewCommand returns the "ops" command with its subcommands (list, show,
// resolve, acknowledge, release). Each connects with connect; the caller
// adds the flags connect reads (--journal-addr…) as persistent flags.
// Errors of a malformed command line wrap ErrUsage; the journal's errors
// are gRPC statuses.
func NewCommand(connect Connect) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ops SUBCOMMAND [flags]",
		Short: "operators' tools over gRPC: review queue, history, resolve, acknowledge, release",
		Long: `Operators' tools, over the journal's gRPC API: list the review queue, show an
operation with its history, and record a decision (resolve, acknowledge) or a
release for retry. Every change is recorded in the operation's history with
its actor and reason.

With --auth-file on the server, the history records the token's name as the
actor; --actor is kept beside it as what you say you act for. Without
authentication --actor is the actor; without it the decision is recorded as
local-admin, as on the console. The token comes from $OPJOURNAL_TOKEN or
--token-file, never from a flag value.`,
		Example: `  opjournal ops list --journal-addr journal:9090 --status unknown --due
  opjournal ops --journal-addr journal:9090 show payment:order-817:intent-01
  opjournal ops resolve KEY --succeeded --external-id pay_42 --reason "seen in the dashboard"`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErr("missing subcommand (%s)", subcommands)
			}
			hint := ""
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				hint = fmt.Sprintf("; did you mean %q?", s[0])
			}
			return usageErr("unknown subcommand %q (%s)%s", args[0], subcommands, hint)
		},
	}
	cmd.SuggestionsMinimumDistance = 2
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErr("%v", err) })
	cmd.AddCommand(listCmd(connect), showCmd(connect), resolveCmd(connect), acknowledgeCmd(connect), releaseCmd(connect), noteCmd(connect),
		approveCmd(connect), rejectCmd(connect))
	return cmd
}

// Run executes one ops subcommand (args[0], with its flags anywhere)
// against the journal, writing its output to w. It returns an error
// wrapping ErrUsage for a malformed command line, and the journal's error
// (a gRPC status) otherwise.
func Run(ctx context.Context, c pb.JournalServiceClient, args []string, w io.Writer) error {
	cmd := NewCommand(func(context.Context) (pb.JournalServiceClient, func(), error) { return c, func() {}, nil })
	cmd.CompletionOptions.DisableDefaultCmd = true
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	cmd.SetArgs(append([]string{}, args...)) // never nil: cobra would read os.Args
	cmd.SetOut(w)
	cmd.SetErr(io.Discard)
	return cmd.ExecuteContext(ctx)
}

// subcommand makes a subcommand whose run receives the journal client.
func subcommand(connect Connect, c *cobra.Command, run func(ctx context.Context, c pb.JournalServiceClient, args []string, w io.Writer) error) *cobra.Command {
	c.RunE = func(cmd *cobra.Command, args []string) error {
		jc, done, err := connect(cmd.Context())
		if err != nil {
			return err
		}
		defer done()
		return run(cmd.Context(), jc, args, cmd.OutOrStdout())
	}
	return c
}

// jsonOutput adds -o/--output json|table, the convention of every
// opjournal command that prints records, and --json, its older spelling
// (the same as -o json), to c. It returns what tells, once the flags are
// parsed, whether JSON was asked for; --json with -o table is refused.
func jsonOutput(c *cobra.Command, what string) func() (bool, error) {
	out := cli.AddOutputFlag(c, what)
	asJSON := c.Flags().Bool("json", false, "the same as -o json")
	return func() (bool, error) {
		if *asJSON && c.Flags().Changed("output") && *out != cli.OutputJSON {
			return false, usageErr("--json and -o %s disagree: give one of them", *out)
		}
		return *asJSON || *out == cli.OutputJSON, nil
	}
}

// noArgs refuses positional arguments.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErr("unexpected arguments %v", args)
	}
	return nil
}

// oneKey wants exactly one positional argument, the operation key.
func oneKey(_ *cobra.Command, args []string) error {
	switch len(args) {
	case 0:
		return usageErr("missing operation key")
	case 1:
		return nil
	}
	return usageErr("one operation key expected, got %q and %q", args[0], args[1])
}

// keyAndText checks the arguments of note: a key and the text ("" to
// clear), so that a forgotten TEXT is a usage error, never a cleared note.
func keyAndText(_ *cobra.Command, args []string) error {
	if len(args) != 2 {
		return usageErr("want KEY TEXT (TEXT \"\" clears the note), got %d argument(s)", len(args))
	}
	return nil
}

// noFiles: an operation key is not a file name.
func noFiles(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return nil, cobra.ShellCompDirectiveNoFileComp
}

var statusNames = map[string]pb.Status{
	"pending": pb.Status_STATUS_PENDING, "in_progress": pb.Status_STATUS_IN_PROGRESS,
	"unknown": pb.Status_STATUS_UNKNOWN, "succeeded": pb.Status_STATUS_SUCCEEDED,
	"failed_final": pb.Status_STATUS_FAILED_FINAL, "awaiting_approval": pb.Status_STATUS_AWAITING_APPROVAL,
}

func listCmd(connect Connect) *cobra.Command {
	c := &cobra.Command{
		Use:   "list [flags]",
		Short: "list operations: by default the review queue (needs_review)",
		Long: `List operations in operation-key order (the journal's list order, which
pages without gaps or repeats while operations change; the UPDATED column
shows when each last changed). Without filters: the review queue, the
operations with needs_review. --ref finds an order's operations (all the refs
given must match), --parent the side effects of an operation.`,
		Example: `  opjournal ops list                          # the review queue
  opjournal ops list --status unknown --due   # what the reconciler will look at next
  opjournal ops list --ref order_id=817       # everything done for order 817
  opjournal ops list --parent KEY -o json     # the side effects of KEY, as JSON lines`,
		Args:              noArgs,
		ValidArgsFunction: noFiles,
	}
	o := &listOpts{refs: refFlag{}}
	fs := c.Flags()
	fs.BoolVar(&o.all, "all", false, "every operation, not only the review queue")
	fs.StringVar(&o.statuses, "status", "", "comma-separated statuses: pending, in_progress, unknown, succeeded, failed_final, awaiting_approval")
	fs.BoolVar(&o.due, "due", false, "only operations due for a reconciliation check")
	fs.StringVar(&o.action, "action", "", "only this action")
	fs.Var(o.refs, "ref", "only operations with this business reference, NAME=VALUE (repeat: all must match)")
	fs.StringVar(&o.parent, "parent", "", "only the children of this operation (side effects registered with its key as parent_key)")
	fs.IntVar(&o.limit, "limit", 50, "at most this many")
	wantJSON := jsonOutput(c, "a table, or one JSON object per operation, a line each")
	_ = c.RegisterFlagCompletionFunc("status", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return slices.Sorted(maps.Keys(statusNames)), cobra.ShellCompDirectiveNoFileComp
	})
	return subcommand(connect, c, func(ctx context.Context, jc pb.JournalServiceClient, _ []string, w io.Writer) error {
		var err error
		if o.asJSON, err = wantJSON(); err != nil {
			return err
		}
		return list(ctx, jc, o, w)
	})
}

// listOpts are list's flags.
type listOpts struct {
	all, due, asJSON bool
	statuses, action string
	parent           string
	refs             refFlag
	limit            int
}

func list(ctx context.Context, c pb.JournalServiceClient, o *listOpts, w io.Writer) error {
	if o.limit < 1 {
		return usageErr("--limit must be at least 1")
	}
	req := &pb.ListOperationsRequest{ActionType: o.action, DueForCheck: o.due, ParentKey: o.parent}
	if len(o.refs) > 0 {
		req.Refs = o.refs
	}
	if o.statuses != "" {
		for _, s := range strings.Split(o.statuses, ",") {
			st, ok := statusNames[strings.TrimSpace(s)]
			if !ok {
				return usageErr("unknown status %q (pending, in_progress, unknown, succeeded, failed_final, awaiting_approval)", s)
			}
			req.Statuses = append(req.Statuses, st)
		}
	}
	if !o.all && o.statuses == "" && !o.due && o.action == "" && len(o.refs) == 0 && o.parent == "" {
		req.NeedsReview = proto.Bool(true)
	}
	var ops []*pb.Operation
	for len(ops) < o.limit {
		req.PageSize = int32(min(o.limit-len(ops), 1000))
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
	if o.asJSON {
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

func showCmd(connect Connect) *cobra.Command {
	c := &cobra.Command{
		Use:   "show KEY [flags]",
		Short: "show an operation's record and its whole history",
		Example: `  opjournal ops show payment:order-817:intent-01
  opjournal ops show payment:order-817:intent-01 -o json  # the record, then one line per event`,
		Args:              oneKey,
		ValidArgsFunction: noFiles,
	}
	wantJSON := jsonOutput(c, "the record and its history, or the operation and then each event as a JSON object, a line each")
	return subcommand(connect, c, func(ctx context.Context, jc pb.JournalServiceClient, args []string, w io.Writer) error {
		asJSON, err := wantJSON()
		if err != nil {
			return err
		}
		return show(ctx, jc, args[0], asJSON, w)
	})
}

func show(ctx context.Context, c pb.JournalServiceClient, key string, asJSON bool, w io.Writer) error {
	op, err := c.Lookup(ctx, &pb.LookupRequest{OperationKey: key})
	if err != nil {
		return err
	}
	evs, err := history(ctx, c, key)
	if err != nil {
		return err
	}
	if asJSON {
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
	if a := o.GetApproval(); a != nil {
		row("approval", approvalSummary(a))
		for i, d := range a.GetApprovals() {
			row(fmt.Sprintf("approval %d", i+1), fmt.Sprintf("%s at %s: %s", labelled(d.GetLabel(), d.GetPrincipal()), ts(d.GetAt()), d.GetReason()))
		}
	}
	row("created_at", ts(o.GetCreatedAt()))
	row("updated_at", ts(o.GetUpdatedAt()))
	if err := tw.Flush(); err != nil {
		return err
	}
	// The note goes after the table, line by line and indented: a note of
	// several lines would break the table's columns.
	if note := o.GetNote(); note != "" {
		fmt.Fprintln(w, "note:")
		for line := range strings.SplitSeq(note, "\n") {
			fmt.Fprintln(w, "  "+line)
		}
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
		actor := labelled(e.GetActorLabel(), e.GetActor())
		if st := e.GetStatedActor(); st != "" && st != e.GetActor() {
			actor += " (says: " + st + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", ts(e.GetAt()), from, statusName(e.GetToStatus()), e.GetAttempt(), actor, reason)
	}
	return tw.Flush()
}

// refFlag collects --ref NAME=VALUE flags.
type refFlag map[string]string

func (r refFlag) String() string { return "" }

// Type names the value in --help.
func (r refFlag) Type() string { return "NAME=VALUE" }

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

func resolveCmd(connect Connect) *cobra.Command {
	c := &cobra.Command{
		Use:   "resolve KEY (--succeeded --external-id ID | --failed-final [--error-code C]) --reason WHY [flags]",
		Short: "decide the outcome of a non-terminal operation that is unknown or under review",
		Long: `Decide the outcome of a non-terminal operation that is unknown or under review:
--succeeded (the effect happened; give the provider's id) or --failed-final (no
effect happened; it is never retried). A terminal operation under review is
acknowledged instead. The decision is recorded in the history with its reason.`,
		Example: `  opjournal ops resolve payment:order-817:intent-01 --succeeded --external-id pay_42 \
      --reason "seen in the provider's dashboard"
  opjournal ops resolve KEY --failed-final --error-code declined --reason "provider confirms decline"`,
		Args:              oneKey,
		ValidArgsFunction: noFiles,
	}
	fs := c.Flags()
	ok := fs.Bool("succeeded", false, "the effect happened")
	failed := fs.Bool("failed-final", false, "no effect happened; never retry")
	extID := fs.String("external-id", "", "with --succeeded: the provider's id of the effect")
	code := fs.String("error-code", "", "with --failed-final: why")
	actor := fs.String("actor", "", actorHelp)
	reason := fs.String("reason", "", "why (required)")
	return subcommand(connect, c, func(ctx context.Context, jc pb.JournalServiceClient, args []string, w io.Writer) error {
		return resolve(ctx, jc, args[0], *ok, *failed, &pb.ResolveRequest{ExternalId: *extID, ErrorCode: *code, Actor: *actor, Reason: *reason}, w)
	})
}

func resolve(ctx context.Context, c pb.JournalServiceClient, key string, ok, failed bool, req *pb.ResolveRequest, w io.Writer) error {
	req.OperationKey = key
	switch {
	case ok == failed:
		return usageErr("give exactly one of --succeeded or --failed-final")
	case ok:
		req.Resolution = pb.Resolution_RESOLUTION_SUCCEEDED
	default:
		req.Resolution = pb.Resolution_RESOLUTION_FAILED_FINAL
	}
	if req.GetReason() == "" {
		return usageErr("--reason is required: the decision is audited")
	}
	var err error
	if req.Actor, err = statedActor(ctx, c, req.GetActor()); err != nil {
		return err
	}
	res, err := c.Resolve(ctx, req)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s resolved as %s\n", key, statusName(res.GetOperation().GetStatus()))
	return err
}

func acknowledgeCmd(connect Connect) *cobra.Command {
	c := &cobra.Command{
		Use:   "acknowledge KEY --reason WHY [flags]",
		Short: "end the review of a terminal operation (e.g. a duplicate effect); its status never changes",
		Long: `End the review of a terminal operation, e.g. one with a detected duplicate
effect or an effect reported after failed_final. Its status, its first
external id and the duplicates it recorded stay; the reason is recorded in the
history.`,
		Example:           `  opjournal ops acknowledge email:dup --reason "pay_2 refunded"`,
		Args:              oneKey,
		ValidArgsFunction: noFiles,
	}
	actor := c.Flags().String("actor", "", actorHelp)
	reason := c.Flags().String("reason", "", "why (required): what was done about it")
	return subcommand(connect, c, func(ctx context.Context, jc pb.JournalServiceClient, args []string, w io.Writer) error {
		return acknowledge(ctx, jc, args[0], *actor, *reason, w)
	})
}

func acknowledge(ctx context.Context, c pb.JournalServiceClient, key, actor, reason string, w io.Writer) error {
	if reason == "" {
		return usageErr("--reason is required: the decision is audited")
	}
	actor, err := statedActor(ctx, c, actor)
	if err != nil {
		return err
	}
	res, err := c.Acknowledge(ctx, &pb.AcknowledgeRequest{OperationKey: key, Actor: actor, Reason: reason})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s acknowledged: still %s, no longer under review\n", key, statusName(res.GetOperation().GetStatus()))
	return err
}

func noteCmd(connect Connect) *cobra.Command {
	c := &cobra.Command{
		Use:   "note KEY TEXT [flags]",
		Short: "attach a note to an operation (any status); an empty TEXT clears it",
		Long: `Attach a free-text note to an operation, in any status, terminal ones
included: at most 2,000 characters, newlines allowed, no other control
characters. It replaces the note the operation had; an empty TEXT ("")
clears it. The note changes nothing else; the history records that it was
set, by whom, but not its text. ` + "`opjournal ops show`" + ` prints it.`,
		Example: `  opjournal ops note payment:order-817:intent-01 "customer asked for a refund, ticket 4711"
  opjournal ops note payment:order-817:intent-01 ""   # clear it`,
		Args:              keyAndText,
		ValidArgsFunction: noFiles,
	}
	actor := c.Flags().String("actor", "", actorHelp)
	return subcommand(connect, c, func(ctx context.Context, jc pb.JournalServiceClient, args []string, w io.Writer) error {
		return setNote(ctx, jc, args[0], args[1], *actor, w)
	})
}

func setNote(ctx context.Context, c pb.JournalServiceClient, key, note, actor string, w io.Writer) error {
	actor, err := statedActor(ctx, c, actor)
	if err != nil {
		return err
	}
	if _, err := c.SetNote(ctx, &pb.SetNoteRequest{OperationKey: key, Note: note, Actor: actor}); err != nil {
		return err
	}
	what := "noted"
	if note == "" {
		what = "note cleared"
	}
	_, err = fmt.Fprintf(w, "%s %s\n", key, what)
	return err
}

// actorHelp is the help of every decision's --actor flag.
const actorHelp = "who you act for: recorded beside the authenticated principal as stated actor, or without authentication as the actor (default: local-admin, as on the console)"

// statedActor returns the actor a decision states: --actor when given.
// Without it, a journal without authentication is told the name it gives
// every unauthenticated caller (WhoAmI's local-admin, the name the console
// records), because such a journal has no other name for the person and
// requires one; with authentication nothing is stated, since the
// principal is the actor. A journal that cannot answer WhoAmI gets the
// flag as given, and its own error names what is missing.
func statedActor(ctx context.Context, c pb.JournalServiceClient, actor string) (string, error) {
	if actor != "" {
		return actor, nil
	}
	me, err := c.WhoAmI(ctx, &pb.WhoAmIRequest{})
	if err != nil {
		if status.Code(err) == codes.Unimplemented {
			return "", nil
		}
		return "", err
	}
	if me.GetAuthenticated() {
		return "", nil
	}
	return me.GetName(), nil
}

// labelled names a principal for people: its label with the id beside
// it, or the id alone (no label, or the same).
func labelled(label, id string) string {
	if label == "" || label == id {
		return id
	}
	return label + " (" + id + ")"
}

// approvalSummary is the approval an operation's policy asked for, in
// one line: why, who may decide, and until when.
func approvalSummary(a *pb.Approval) string {
	parts := []string{"required (" + a.GetRule() + ")", "by " + strings.Join(a.GetApprovers(), " or ")}
	if a.GetTwoPerson() {
		parts = append(parts, "two persons")
	}
	if a.GetDistinctFromRequester() {
		parts = append(parts, "not "+labelled(a.GetRequestedByLabel(), a.GetRequestedBy()))
	}
	if d := ts(a.GetDeadline()); d != "" {
		parts = append(parts, "until "+d+", then "+a.GetOnTimeout())
	}
	return strings.Join(parts, "; ")
}

func approveCmd(connect Connect) *cobra.Command {
	c := &cobra.Command{
		Use:   "approve KEY --hash H --reason WHY [flags]",
		Short: "approve the exact request of an operation awaiting approval",
		Long: `Approve the exact request of an operation awaiting approval: --hash is the
request_hash you checked (ops show prints it); another one is refused
(PAYLOAD_MISMATCH), so you approve what you saw and nothing else. The
operation becomes pending and the agent's next call runs it; under
two_person it waits for a second approval from another person. The approval
is recorded in the history with you as the actor.`,
		Example:           `  opjournal ops approve payment:order-900:intent-01 --hash 5112…40ed --reason "amount agreed with the customer"`,
		Args:              oneKey,
		ValidArgsFunction: noFiles,
	}
	hash := c.Flags().String("hash", "", "the request_hash you checked (required)")
	actor := c.Flags().String("actor", "", actorHelp)
	reason := c.Flags().String("reason", "", "why (required)")
	return subcommand(connect, c, func(ctx context.Context, jc pb.JournalServiceClient, args []string, w io.Writer) error {
		return approve(ctx, jc, &pb.ApproveRequest{OperationKey: args[0], RequestHash: *hash, Actor: *actor, Reason: *reason}, w)
	})
}

func approve(ctx context.Context, c pb.JournalServiceClient, req *pb.ApproveRequest, w io.Writer) error {
	if req.GetRequestHash() == "" || req.GetReason() == "" {
		return usageErr("--hash and --reason are required: you approve the exact request you checked, and the decision is audited")
	}
	var err error
	if req.Actor, err = statedActor(ctx, c, req.GetActor()); err != nil {
		return err
	}
	res, err := c.Approve(ctx, req)
	if err != nil {
		return err
	}
	if res.GetReleased() {
		_, err = fmt.Fprintf(w, "%s approved: now %s\n", req.GetOperationKey(), statusName(res.GetOperation().GetStatus()))
	} else {
		_, err = fmt.Fprintf(w, "%s approved (1 of 2): a second person must approve\n", req.GetOperationKey())
	}
	return err
}

func rejectCmd(connect Connect) *cobra.Command {
	c := &cobra.Command{
		Use:   "reject KEY --hash H --reason WHY [--error-code C] [flags]",
		Short: "reject the request of an operation awaiting approval: it ends failed_final",
		Long: `Reject the request of an operation awaiting approval: it becomes failed_final
with --error-code (default approval_rejected), and every retry of the agent
is told so. --hash is the request_hash you checked.`,
		Example:           `  opjournal ops reject payment:order-900:intent-01 --hash 5112…40ed --reason "not ordered by the customer"`,
		Args:              oneKey,
		ValidArgsFunction: noFiles,
	}
	hash := c.Flags().String("hash", "", "the request_hash you checked (required)")
	code := c.Flags().String("error-code", "", "the error code it ends with (default approval_rejected)")
	actor := c.Flags().String("actor", "", actorHelp)
	reason := c.Flags().String("reason", "", "why (required)")
	return subcommand(connect, c, func(ctx context.Context, jc pb.JournalServiceClient, args []string, w io.Writer) error {
		return reject(ctx, jc, &pb.RejectRequest{OperationKey: args[0], RequestHash: *hash, ErrorCode: *code, Actor: *actor, Reason: *reason}, w)
	})
}

func reject(ctx context.Context, c pb.JournalServiceClient, req *pb.RejectRequest, w io.Writer) error {
	if req.GetRequestHash() == "" || req.GetReason() == "" {
		return usageErr("--hash and --reason are required: you reject the exact request you checked, and the decision is audited")
	}
	var err error
	if req.Actor, err = statedActor(ctx, c, req.GetActor()); err != nil {
		return err
	}
	res, err := c.Reject(ctx, req)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s rejected: now %s (%s)\n", req.GetOperationKey(), statusName(res.GetOperation().GetStatus()), res.GetOperation().GetErrorCode())
	return err
}

func releaseCmd(connect Connect) *cobra.Command {
	c := &cobra.Command{
		Use:   "release KEY --reason WHY [flags]",
		Short: "release an unknown operation for retry: its latest attempt was absent at the provider",
		Long: `Release an operation whose outcome is unknown for a retry, because its latest
attempt is known to be absent at the provider. The journal refuses while the
provider's visibility lag has not passed or a person must review it.`,
		Example:           `  opjournal ops release payment:order-817:intent-01 --reason "provider support confirms no charge"`,
		Args:              oneKey,
		ValidArgsFunction: noFiles,
	}
	actor := c.Flags().String("actor", "", actorHelp)
	reason := c.Flags().String("reason", "", "why: what the provider showed (required)")
	attempt := c.Flags().Int("attempt", 0, "the latest attempt (default: looked up)")
	return subcommand(connect, c, func(ctx context.Context, jc pb.JournalServiceClient, args []string, w io.Writer) error {
		return release(ctx, jc, args[0], *actor, *reason, *attempt, w)
	})
}

func release(ctx context.Context, c pb.JournalServiceClient, key, actor, reason string, attempt int, w io.Writer) error {
	if reason == "" {
		return usageErr("--reason is required: the decision is audited")
	}
	actor, err := statedActor(ctx, c, actor)
	if err != nil {
		return err
	}
	if attempt == 0 {
		op, err := c.Lookup(ctx, &pb.LookupRequest{OperationKey: key})
		if err != nil {
			return err
		}
		attempt = int(op.GetOperation().GetAttemptCount())
	}
	if _, err := c.ReleaseForRetry(ctx, &pb.ReleaseForRetryRequest{OperationKey: key, Attempt: int32(attempt), Actor: actor, Reason: reason}); err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s released for retry (attempt %d was absent at the provider)\n", key, attempt)
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
