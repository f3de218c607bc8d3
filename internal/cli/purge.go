package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/opjournal/opjournal/journal"
)

// PrintPurge writes what a purge pass removed (or, dry, would remove):
// one line per action, then the total.
func PrintPurge(w io.Writer, reports []journal.PurgeReport, dryRun bool, took time.Duration) {
	verb := "removed"
	if dryRun {
		verb = "would remove"
		fmt.Fprintln(w, "dry run: nothing is deleted")
	}
	var ops, evs int64
	for _, r := range reports {
		ops, evs = ops+r.Operations, evs+r.Events
		if r.Operations == 0 {
			fmt.Fprintf(w, "%s (retention %s): nothing to remove\n", r.Action, FormatDuration(r.Retention))
			continue
		}
		fmt.Fprintf(w, "%s (retention %s): %s %d operations and %d history entries, last changed from %s to %s\n",
			r.Action, FormatDuration(r.Retention), verb, r.Operations, r.Events,
			r.Oldest.UTC().Format(time.RFC3339), r.Newest.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "total: %s %d operations and %d history entries in %s\n", verb, ops, evs, took.Round(time.Millisecond))
}

// purgeRecord is one action's line of PrintPurgeJSON.
type purgeRecord struct {
	Action     string `json:"action"`
	Retention  string `json:"retention"`
	DryRun     bool   `json:"dry_run"`
	Operations int64  `json:"operations"`
	Events     int64  `json:"events"`
	Oldest     string `json:"oldest,omitempty"`
	Newest     string `json:"newest,omitempty"`
}

// PrintPurgeJSON writes what a purge pass removed (or, dry, would remove)
// as one JSON object per action, a line each (-o json): the records
// PrintPurge shows, for a program to read. Oldest and newest are RFC 3339
// and left out when the action had nothing to remove.
func PrintPurgeJSON(w io.Writer, reports []journal.PurgeReport, dryRun bool) error {
	enc := json.NewEncoder(w)
	for _, r := range reports {
		rec := purgeRecord{Action: r.Action, Retention: FormatDuration(r.Retention), DryRun: dryRun,
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

// FormatDuration formats d without trailing zero units ("720h", not
// "720h0m0s").
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
