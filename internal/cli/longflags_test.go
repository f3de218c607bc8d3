package cli_test

import (
	"slices"
	"testing"

	"github.com/spf13/cobra"

	"github.com/opjournal/opjournal/internal/cli"
)

func TestLongFlags(t *testing.T) {
	t.Parallel()
	root := &cobra.Command{Use: "x"}
	sub := &cobra.Command{Use: "sub"}
	sub.Flags().String("database-url", "", "")
	sub.Flags().BoolP("verbose", "v", false, "")
	root.PersistentFlags().String("journal-addr", "", "")
	root.AddCommand(sub)
	in := []string{"sub", "-database-url", "a", "-journal-addr=b", "-v", "-help", "-nope", "--", "-database-url"}
	want := []string{"sub", "--database-url", "a", "--journal-addr=b", "-v", "--help", "-nope", "--", "-database-url"}
	if got := cli.LongFlags(root, in); !slices.Equal(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}
