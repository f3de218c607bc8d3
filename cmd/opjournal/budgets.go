package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/internal/cli"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

const budgetsLong = `Show the budgets' counters of your tenant (the policy's budgets: blocks,
docs/policy.md "Budgets"): per action, budget and scope (the principal,
currency or other values a budget is counted per), what is used of the limit
within the rolling window now (the database's clock), the part of it reserved
by operations whose outcome is not yet known (given back if they fail
finally), how many operations hold it, the window and what a registration
past the limit gets (on_exceed: reject or approval).

Every budget of the policy is listed: once per scope in which something
counts, or once without a scope ("-") when nothing does. It calls the
journal's ListBudgets over gRPC, as "opjournal ops" does, with a reconciler's,
operator's or admin's token (from $OPJOURNAL_TOKEN or --token-file).`

// budgetNameRE is what a budget name may be (the policy's rule); a
// --budget that is not one is refused before any call.
var budgetNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// budgetsFlags are the command's own flags.
type budgetsFlags struct {
	action, budget string
	output         *cli.Output
}

// budgetsCommand is `opjournal budgets`: the tenant's budget counters,
// read over gRPC (ListBudgets) with the journal flags of `opjournal ops`.
func budgetsCommand() *cobra.Command {
	var jf cli.JournalFlags
	var timeout time.Duration
	var f budgetsFlags
	journalFlags := pflag.NewFlagSet("budgets", pflag.ContinueOnError)
	jf.Register(journalFlags)
	journalFlags.DurationVar(&timeout, "timeout", 10*time.Second, "give up after this long")
	// Only the connection's flags read OPJOURNAL_* variables, as for
	// `opjournal ops`: a filter from the environment would surprise.
	cli.MirrorEnv(journalFlags)
	c := &cobra.Command{
		Use:   "budgets [--action A] [--budget B] [-o json|table] [flags]",
		Short: "show the budgets' counters: what each budget holds of its limit, per scope",
		Long:  budgetsLong,
		Example: `  opjournal budgets --journal-addr journal:9090
  opjournal budgets --action create_payment --budget daily-spend
  opjournal budgets -o json     # one JSON object per counter, as GET /v1/budgets has them`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.budget != "" && !budgetNameRE.MatchString(f.budget) {
				return cli.Usage(fmt.Errorf("--budget: %q is not a budget name (1-63 characters of a-z, 0-9 and '-', starting with a letter or digit)", f.budget))
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			conn, cc, err := jf.Dial()
			if err != nil {
				return fmt.Errorf("budgets: %w", err)
			}
			defer conn.Close()
			return listBudgets(ctx, pb.NewJournalServiceClient(cc), &f, cmd.OutOrStdout())
		},
	}
	c.Flags().AddFlagSet(journalFlags)
	c.Flags().StringVar(&f.action, "action", "", "only this action's budgets")
	c.Flags().StringVar(&f.budget, "budget", "", "only this budget (by name)")
	f.output = cli.AddOutputFlag(c, "a table, or one JSON object per counter, a line each")
	return c
}

// listBudgets calls ListBudgets with the filters and prints the counters.
// The journal refuses a --budget its policy does not have; an empty answer
// to one (from a journal that does not) means the same, as every budget
// is listed, used or not.
func listBudgets(ctx context.Context, c pb.JournalServiceClient, f *budgetsFlags, w io.Writer) error {
	res, err := c.ListBudgets(ctx, &pb.ListBudgetsRequest{ActionType: f.action, Budget: f.budget})
	if err != nil {
		return err
	}
	bs := res.GetBudgets()
	if len(bs) == 0 && f.budget != "" {
		where := "the journal's policy"
		if f.action != "" {
			where = "action " + f.action
		}
		return fmt.Errorf("budgets: --budget: %q is not a budget of %s", f.budget, where)
	}
	if *f.output == cli.OutputJSON {
		for _, b := range bs {
			// The objects GET /v1/budgets returns: proto names, every
			// field (used 0 included), int64 as strings.
			raw, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(b)
			if err != nil {
				return err
			}
			var compact json.RawMessage = raw
			line, err := json.Marshal(compact)
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(w, "%s\n", line); err != nil {
				return err
			}
		}
		return nil
	}
	if len(bs) == 0 {
		what := "the journal's policy defines no budgets"
		if f.action != "" {
			what = "action " + f.action + " has no budgets"
		}
		_, err := fmt.Fprintln(w, "no budgets: "+what)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ACTION\tBUDGET\tSCOPE\tUSED\tLIMIT\tUSE\tRESERVED_UNKNOWN\tOPERATIONS\tWINDOW\tCOUNTS\tON_EXCEED")
	for _, b := range bs {
		counts := "count"
		if b.GetSum() != "" {
			counts = "sum of " + b.GetSum()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%d\t%d\t%s\t%s\t%s\n", b.GetActionType(), b.GetBudget(), scopeText(b.GetScope()),
			b.GetUsed(), b.GetLimit(), opjournal.UsePercent(b.GetUsed(), b.GetLimit()), b.GetReservedUnknown(), b.GetOperations(),
			windowText(time.Duration(b.GetWindowSeconds())*time.Second), counts, b.GetOnExceed())
	}
	return tw.Flush()
}

// scopeText words a counter's scope (canonical JSON of its values) on one
// line: name=value pairs in name order, a string value unquoted unless it
// holds spaces, '=' or control characters (then Go-quoted, so the table's
// columns hold); "(tenant)" for the tenant as a whole, "-" for a budget
// listed without a scope (nothing counts in it).
func scopeText(scope string) string {
	switch scope {
	case "":
		return "-"
	case "{}":
		return "(tenant)"
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(scope), &obj); err != nil {
		return strconv.Quote(scope)
	}
	names := make([]string, 0, len(obj))
	for name := range obj {
		names = append(names, name)
	}
	slices.Sort(names)
	parts := make([]string, 0, len(names))
	for _, name := range names {
		raw := obj[name]
		v := string(raw)
		var s string
		if len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
			v = s
			if s == "" || strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) || r == '=' || r == '"' }) {
				v = strconv.Quote(s)
			}
		}
		parts = append(parts, name+"="+v)
	}
	return strings.Join(parts, " ")
}

// windowText words a window as the policy writes it ("24h", "7d").
func windowText(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0 && d > 48*time.Hour:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	case d%time.Hour == 0 && d > 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0 && d > 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	}
	return d.String()
}
