// Package purgeprint writes what `opjournal purge` removed. It is apart
// from package cli because it needs the journal's PurgeReport: cli is
// linked by every command (the gateway and the reconciler too), and those
// must not link the journal service, the stores and the hash keys only to
// share flag parsing and logging.
package purgeprint

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/protocol/policy"
)

// Print writes what a purge pass removed (or, dry, would remove):
// one line per action, then the total.
func Print(w io.Writer, reports []journal.PurgeReport, dryRun bool, took time.Duration) {
	verb := "removed"
	if dryRun {
		verb = "would remove"
		fmt.Fprintln(w, "dry run: nothing is deleted")
	}
	var ops, evs int64
	for _, r := range reports {
		ops, evs = ops+r.Operations, evs+r.Events
		if r.Operations == 0 {
			fmt.Fprintf(w, "%s (retention %s): nothing to remove\n", r.Action, policy.FormatDuration(r.Retention))
			continue
		}
		fmt.Fprintf(w, "%s (retention %s): %s %d operations and %d history entries, last changed from %s to %s\n",
			r.Action, policy.FormatDuration(r.Retention), verb, r.Operations, r.Events,
			r.Oldest.UTC().Format(time.RFC3339), r.Newest.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "total: %s %d operations and %d history entries in %s\n", verb, ops, evs, took.Round(time.Millisecond))
}

// purgeRecord is one action's line of JSON.
type purgeRecord struct {
	Action     string `json:"action"`
	Retention  string `json:"retention"`
	DryRun     bool   `json:"dry_run"`
	Operations int64  `json:"operations"`
	Events     int64  `json:"events"`
	Oldest     string `json:"oldest,omitempty"`
	Newest     string `json:"newest,omitempty"`
}

// JSON writes what a purge pass removed (or, dry, would remove)
// as one JSON object per action, a line each (-o json): the records
// Print shows, for a program to read. Oldest and newest are RFC 3339
// and left out when the action had nothing to remove.
func JSON(w io.Writer, reports []journal.PurgeReport, dryRun bool) error {
	enc := json.NewEncoder(w)
	for _, r := range reports {
		rec := purgeRecord{Action: r.Action, Retention: policy.FormatDuration(r.Retention), DryRun: dryRun,
			Operations: r.Operations, Events: r.Events}
		if r.Operations > 0 {
			rec.Oldest, rec.Newest = r.Oldest.UTC().Format(time.RFC3339), r.Newest.UTC().Format(time.RFC3339)
		}
		if err := enc.Encode(rec); err != nil {
			return err
		}
	}
	return nil
}
