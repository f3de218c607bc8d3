package cli

import (
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// LongFlags returns args with every -name or -name=value whose name is a
// long flag of root or of one of its subcommands written --name: Go's flag
// package, which opjournal's commands used before, accepts both, and
// scripts may rely on it. Single-letter shorthands (-h) and everything
// after "--" are left alone.
func LongFlags(root *cobra.Command, args []string) []string {
	names := map[string]bool{"help": true, "version": true}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) { names[f.Name] = true })
		c.PersistentFlags().VisitAll(func(f *pflag.Flag) { names[f.Name] = true })
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' {
			if name, _, _ := strings.Cut(a[1:], "="); len(name) > 1 && names[name] {
				a = "-" + a
			}
		}
		out = append(out, a)
	}
	return out
}
