package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The command-line convention every opjournal binary shares:
//
//   - cobra commands whose flags may come anywhere, as --name or (as Go's
//     flag package read them, which scripts may rely on) -name;
//   - --help with examples, a version subcommand and --version, and
//     cobra's completion subcommand;
//   - flags marked with MirrorEnv also read their OPJOURNAL_* variable, a
//     flag on the command line winning;
//   - exit status 0 on success and for --help, 2 for a usage error (a bad
//     flag, argument or variable, or an error marked with Usage), 1 for any
//     other error.
//
// NewRoot sets up a binary's root command, Execute runs it and Exit ends
// the process with the status.

// envAnnotation marks a flag that MirrorEnv made settable by a variable;
// its value is the variable's name.
const envAnnotation = "opjournal_env"

// notMirrored are the flags whose variables would surprise: OPJOURNAL_HELP
// must not turn every run into --help, nor OPJOURNAL_OUTPUT change what a
// script parses.
var notMirrored = map[string]bool{"help": true, "version": true, "output": true}

// MirrorEnv makes every flag defined so far on fs settable by its
// environment variable (EnvName: --database-url is OPJOURNAL_DATABASE_URL),
// and names the variable in the flag's help. Execute applies the
// variables after parsing, to the flags the command line did not set.
func MirrorEnv(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if notMirrored[f.Name] || f.Annotations[envAnnotation] != nil {
			return
		}
		env := EnvName(f.Name)
		if f.Annotations == nil {
			f.Annotations = map[string][]string{}
		}
		f.Annotations[envAnnotation] = []string{env}
		f.Usage += " [$" + env + "]"
	})
}

// applyEnv sets each mirrored flag of cmd (its own and those it inherits)
// that the command line left alone from its variable. The error names
// every variable whose value its flag refuses, with the value: only typed
// flags (durations, numbers, booleans, host names) refuse one, and those
// hold no secret (a string flag, such as a database URL, takes any value).
func applyEnv(cmd *cobra.Command) error {
	var bad []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		names := f.Annotations[envAnnotation]
		if len(names) == 0 || f.Changed {
			return
		}
		v, ok := os.LookupEnv(names[0])
		if !ok {
			return
		}
		if err := f.Value.Set(v); err != nil {
			bad = append(bad, fmt.Sprintf("%s=%q: %v", names[0], v, err))
		}
	})
	if len(bad) > 0 {
		return Usage(errors.New(strings.Join(bad, "; ")))
	}
	return nil
}

// NoArgs refuses positional arguments, as a usage error. On a command
// whose subcommands are its point (opjournal serve, ops list…) the first
// is taken for a mistyped one, as it is when it is near the name of one
// (verison), and the nearest name is suggested.
func NoArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's default, set only where it suggests itself
	}
	hint := ""
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		hint = fmt.Sprintf("; did you mean %q?", s[0])
	}
	if hint != "" || hasOwnSubcommands(cmd) {
		return Usage(fmt.Errorf("unknown command %q for %q%s", args[0], cmd.CommandPath(), hint))
	}
	return Usage(fmt.Errorf("unexpected arguments: %v", args))
}

// hasOwnSubcommands reports whether cmd has subcommands besides those
// every root has (version, completion, help).
func hasOwnSubcommands(cmd *cobra.Command) bool {
	for _, sub := range cmd.Commands() {
		switch sub.Name() {
		case "version", "completion", "help":
		default:
			if sub.IsAvailableCommand() {
				return true
			}
		}
	}
	return false
}

// NewRoot makes c the root command of a binary: it prints to stdout and
// stderr, has --version and a version subcommand (printing version, or
// Version("") when it is empty), cobra's completion subcommand, and a bad
// flag is a usage error. A root that runs something and says nothing of
// its arguments takes none. Execute runs it.
func NewRoot(c *cobra.Command, version string, stdout, stderr io.Writer) *cobra.Command {
	if version == "" {
		version = Version("")
	}
	c.Version = version
	c.SilenceErrors, c.SilenceUsage = true, true
	c.SetOut(stdout)
	c.SetErr(stderr)
	c.SetVersionTemplate("{{.Version}}\n")
	c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return Usage(err) })
	if c.Args == nil && c.RunE != nil {
		c.Args = NoArgs
	}
	c.AddCommand(&cobra.Command{
		Use:     "version",
		Short:   "print the version",
		Example: "  " + c.Name() + " version\n  " + c.Name() + " --version",
		Args:    NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), version)
			return err
		},
	})
	return c
}

// runtimeError marks an error returned by a command's own code (its run
// or hooks), as opposed to cobra's refusal of the command line.
type runtimeError struct{ error }

func (e runtimeError) Unwrap() error { return e.error }

// ran marks err, unless it is nil or already a usage error, as the
// command's own.
func ran(err error) error {
	var ue usageError
	if err == nil || errors.As(err, &ue) {
		return err
	}
	return runtimeError{err}
}

// Execute runs root (made by NewRoot) on args, without the program name.
// It reads -name as --name, applies the mirrored variables before a
// command's hooks run, and returns nil, a usage error (Usage: cobra's
// refusals of the command line, the variables' errors, and the errors the
// commands marked), or the commands' other errors as they returned them.
// Call it once per root.
func Execute(ctx context.Context, root *cobra.Command, args []string) error {
	_, err := ExecuteC(ctx, root, args)
	return err
}

// ExecuteC is Execute, also returning the command that ran (or was
// refused).
func ExecuteC(ctx context.Context, root *cobra.Command, args []string) (*cobra.Command, error) {
	wrapHooks(root)
	root.SetArgs(LongFlags(root, args))
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return cmd, nil
	}
	var re runtimeError
	if errors.As(err, &re) {
		return cmd, re.error
	}
	var ue usageError
	if !errors.As(err, &ue) {
		ue = usageError{error: err}
	}
	if ue.hint == "" && cmd != nil {
		ue.hint = fmt.Sprintf("Run '%s --help' for usage.", cmd.CommandPath())
	}
	return cmd, ue
}

// wrapHooks makes every command of the tree apply the mirrored variables
// first (cobra runs only the nearest PersistentPreRunE, so each command
// gets one that then calls the nearest original), and marks the errors of
// the commands' own code as theirs.
func wrapHooks(root *cobra.Command) {
	var cmds []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		cmds = append(cmds, c)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	nearest := map[*cobra.Command]func(*cobra.Command, []string) error{}
	for _, c := range cmds {
		for p := c; p != nil; p = p.Parent() {
			if p.PersistentPreRunE != nil {
				nearest[c] = p.PersistentPreRunE
				break
			}
		}
	}
	for _, c := range cmds {
		hook := nearest[c]
		c.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
			if err := applyEnv(cmd); err != nil {
				return err
			}
			if hook == nil {
				return nil
			}
			return ran(hook(cmd, args))
		}
		if pre := c.PreRunE; pre != nil {
			c.PreRunE = func(cmd *cobra.Command, args []string) error { return ran(pre(cmd, args)) }
		}
		if run := c.RunE; run != nil {
			c.RunE = func(cmd *cobra.Command, args []string) error { return ran(run(cmd, args)) }
		}
	}
}

// Version is build, when a release build sets it (go build -ldflags "-X
// main.buildVersion=v1.2.3" for a main that passes its variable), else the
// module version and the VCS stamp Go records (unless built with
// -buildvcs=false).
func Version(build string) string {
	if build != "" {
		return build
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = ", modified"
			}
		}
	}
	if rev != "" && v == "(devel)" {
		v += fmt.Sprintf(" (commit %.12s, %s%s)", rev, at, dirty)
	}
	return v
}

// Output is the value of -o/--output: how a command prints its records.
type Output string

// The formats of -o.
const (
	// OutputTable is for people: aligned columns, or the command's
	// one-line summary.
	OutputTable Output = "table"
	// OutputJSON is for programs: one JSON object per record, a line each.
	OutputJSON Output = "json"
)

// String returns the format's name.
func (o *Output) String() string { return string(*o) }

// Type names the value in --help.
func (o *Output) Type() string { return "format" }

// Set accepts json or table.
func (o *Output) Set(v string) error {
	switch Output(v) {
	case OutputJSON, OutputTable:
		*o = Output(v)
		return nil
	}
	return fmt.Errorf("want json or table")
}

// AddOutputFlag adds -o/--output json|table (default table) to c, with
// its completion, and returns its value. what says what it formats.
func AddOutputFlag(c *cobra.Command, what string) *Output {
	o := OutputTable
	c.Flags().VarP(&o, "output", "o", "json or table: "+what)
	_ = c.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return []cobra.Completion{"json", "table"}, cobra.ShellCompDirectiveNoFileComp
	})
	return &o
}
