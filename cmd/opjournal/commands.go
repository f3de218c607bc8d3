package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	"github.com/opjournal/opjournal/internal/cli"
	"github.com/opjournal/opjournal/internal/ops"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/server"
	"github.com/opjournal/opjournal/server/auth"
)

// run executes the command line args (without the program name) with
// the shared convention (cli.Execute): flags anywhere after their command,
// -name read as --name, usage errors apart (exit status 2).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd, err := cli.ExecuteC(ctx, newRoot(stdout, stderr), args)
	if err == nil {
		return nil
	}
	if errors.Is(err, ops.ErrUsage) {
		fmt.Fprint(stderr, cmd.UsageString())
		return cli.Usage(err)
	}
	if st, ok := status.FromError(err); ok && callsJournal(cmd) {
		return fmt.Errorf("%s: %s", strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" "), journalError(cmd, st))
	}
	return err
}

// callsJournal reports whether cmd is one of the commands that call the
// journal over gRPC (ops SUBCOMMAND, budgets), whose refusals are worded
// by journalError.
func callsJournal(cmd *cobra.Command) bool {
	return cmd.Name() == "budgets" && cmd.Parent() == cmd.Root() || cmd.Parent() != nil && cmd.Parent().Name() == "ops"
}

// journalError words the journal's refusal for the person at the command
// line: the journal's own code (PAYLOAD_MISMATCH, INVALID_STATE, … from
// the status's ErrorInfo, which says what happened, where the transport's
// code may not: a wrong --hash travels as gRPC AlreadyExists) and, when a
// request field is at fault, the flag that sets it (--hash for
// request_hash), so the message says what to change on the line.
func journalError(cmd *cobra.Command, st *status.Status) string {
	code, field := st.Code().String(), ""
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == server.ErrorDomain {
			code, field = info.GetReason(), info.GetMetadata()["field"]
		}
	}
	msg := st.Message()
	if field != "" {
		if flag := flagOf(cmd, field); flag != "" {
			msg = flag + ": " + strings.TrimPrefix(msg, field+": ")
		}
	}
	return code + ": " + msg
}

// flagOf returns the flag of cmd that sets the request field, or "" when
// no flag does (a field the command fills itself).
func flagOf(cmd *cobra.Command, field string) string {
	name := strings.ReplaceAll(field, "_", "-")
	switch field {
	case "request_hash":
		name = "hash"
	case "action_type":
		name = "action" // ops list --action, budgets --action
	}
	if cmd.Flags().Lookup(name) == nil {
		return ""
	}
	return "--" + name
}

const rootLong = `opjournal — the operation journal for AI agents' irreversible actions.

Every flag may also be given as an environment variable: --database-url is
OPJOURNAL_DATABASE_URL, --journal-addr is OPJOURNAL_JOURNAL_ADDR, and so on; a
flag on the command line wins. Flags may come anywhere after their command.

Install the binaries with "go install ./cmd/..." from a checkout (they go to
$(go env GOPATH)/bin, or $GOBIN: put it on your PATH). Shell completion:
"opjournal completion bash|zsh|fish --help".`

// newRoot builds the command tree.
func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "opjournal",
		Short: "the operation journal for AI agents' irreversible actions",
		Long:  rootLong,
		Example: `  opjournal serve --database-url sqlite://opjournal.db
  opjournal ops list --journal-addr 127.0.0.1:9090 --status unknown
  opjournal budgets --journal-addr 127.0.0.1:9090 --action create_payment
  opjournal token --name alice --tenant team-a --roles operator --append tokens.yaml
  source <(opjournal completion bash)`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprint(stderr, cmd.UsageString())
			return cli.Usage(errors.New("missing command"))
		},
	}
	root.AddCommand(serveCommand(stderr), migrateCommand(stderr), opsCommand(), budgetsCommand(), tokenCommand(stdout, stderr),
		purgeCommand(stdout, stderr), hashkeyCommand(stdout))
	return cli.NewRoot(root, cli.Version(buildVersion), stdout, stderr)
}

// withFlags adds the flags of fs to c, mirrored by their OPJOURNAL_*
// variables when env is true, and makes c refuse positional arguments.
func withFlags(c *cobra.Command, fs *pflag.FlagSet, env bool) *cobra.Command {
	if env {
		cli.MirrorEnv(fs)
	}
	c.Flags().AddFlagSet(fs)
	c.Args = cli.NoArgs
	return c
}

func serveCommand(stderr io.Writer) *cobra.Command {
	var o options
	c := &cobra.Command{
		Use:   "serve [flags]",
		Short: "run the service: gRPC, the REST mirror and the operators' console",
		Long: `Run the journal: the gRPC JournalService on --grpc-addr, and on --http-addr the
REST mirror (/v1/…), /openapi.json, /metrics, /healthz and the operators'
console (/console/). Without --auth-file every caller is the default tenant
with every role, so only loopback addresses are accepted (or --insecure), and
only requests addressed to localhost, 127.0.0.1 or [::1] (or a name given
with --allowed-hosts): others get 421 (HTTP) or PERMISSION_DENIED (gRPC), so
that no web page can reach the journal through a rebound DNS name.
It logs {"msg":"serving",…} once both listeners are up.`,
		Example: `  opjournal serve                                   # SQLite in ./opjournal.db, on 127.0.0.1
  opjournal serve --database-url postgres://opjournal@db:5432/opjournal \
      --auth-file tokens.yaml --grpc-addr 0.0.0.0:9090 --http-addr 0.0.0.0:8080 \
      --tls-cert cert.pem --tls-key key.pem --hash-key-file hashkeys.yaml`,
		RunE: func(cmd *cobra.Command, _ []string) error { return serve(cmd.Context(), &o, stderr) },
	}
	return withFlags(c, flags("serve", stderr, &o, true), true)
}

func migrateCommand(stderr io.Writer) *cobra.Command {
	var o options
	c := &cobra.Command{
		Use:   "migrate [flags]",
		Short: "apply the database migrations and exit",
		Long: `Apply the schema migrations to the database and exit. serve applies them too
when it starts; on PostgreSQL an advisory lock makes concurrent runs safe.
Behind PgBouncer in transaction mode (a URL with
default_query_exec_mode=cache_describe) serve does not migrate: run this
first, on a direct URL to PostgreSQL (the lock is a session's).`,
		Example: `  opjournal migrate --database-url postgres://opjournal@db:5432/opjournal`,
		RunE:    func(*cobra.Command, []string) error { return migrateCmd(&o, stderr) },
	}
	return withFlags(c, flags("migrate", stderr, &o, false), true)
}

// purgeFlags are purge's own flags, beside the shared options.
type purgeFlags struct {
	dryRun      bool
	action      string
	lockTimeout time.Duration
	output      *cli.Output
}

func purgeCommand(stdout, stderr io.Writer) *cobra.Command {
	var o options
	var p purgeFlags
	fs := flags("purge", stderr, &o, false)
	fs.BoolVar(&p.dryRun, "dry-run", false, "count what would be removed; delete nothing")
	fs.StringVar(&p.action, "action", "", "only this action (default: every action of the policy)")
	fs.DurationVar(&p.lockTimeout, "lock-timeout", time.Minute, "how long to wait while another process purges")
	c := &cobra.Command{
		Use:   "purge [flags]",
		Short: "delete (or count) terminal operations older than their action's retention",
		Long: `Delete the terminal operations (succeeded, failed_final; not under review) that
have not changed for their action's retention, with their history and refs,
and print what was removed per action. An operation that is not terminal is
never purged. It takes the same --policy as the server, and waits up to
--lock-timeout for a server that is purging the same database.`,
		Example: `  opjournal purge --dry-run --database-url postgres://…    # what would go; deletes nothing
  opjournal purge --action create_payment --database-url postgres://…
  opjournal purge --dry-run -o json --database-url sqlite://opjournal.db   # one JSON object per action`,
		RunE: func(cmd *cobra.Command, _ []string) error { return purgeCmd(cmd.Context(), &o, &p, stdout, stderr) },
	}
	withFlags(c, fs, true)
	p.output = cli.AddOutputFlag(c, "one line per action and the total, or one JSON object per action")
	return c
}

func hashkeyCommand(stdout io.Writer) *cobra.Command {
	fs := pflag.NewFlagSet("hashkey", pflag.ContinueOnError)
	id := fs.String("id", "", "the new key's id (default k<unix time>)")
	rotate := fs.String("rotate", "", "put the new key first in this key file (created 0600 if missing), keeping the others")
	c := &cobra.Command{
		Use:   "hashkey [--rotate FILE] [flags]",
		Short: "make a request-hash key file, or put a new current key first in one",
		Long: `Print a new request-hash key file (the keys of the keyed hash of actions with
redact_fields), or with --rotate put a new current key first in FILE, keeping
the older keys to verify the operations hashed under them.`,
		Example: `  opjournal hashkey > hashkeys.yaml && chmod 600 hashkeys.yaml
  opjournal hashkey --rotate hashkeys.yaml`,
		RunE: func(*cobra.Command, []string) error { return hashkeyCmd(id, rotate, stdout) },
	}
	return withFlags(c, fs, true)
}

const tokenLong = `Make a new random bearer token (256 bits) and its entry in the tokens file
(--auth-file of opjournal serve). The token is printed once, on stdout, and
stored nowhere: the file holds only its SHA-256. With --append FILE the entry
is added to FILE (created 0600, with the tokens: line, if missing; a name the
file already has is refused) and stdout holds only the token.

The tokens file is YAML with one top-level key, tokens:, a list of entries:

` + auth.FileExample + `
Roles: agent (Register, Claim, Mark*, Lookup), reconciler, operator, admin
(everything), metrics (only GET /metrics). Restart the server to load a
changed file.`

func tokenCommand(stdout, stderr io.Writer) *cobra.Command {
	fs := pflag.NewFlagSet("token", pflag.ContinueOnError)
	name := fs.String("name", "", "the token's name, shown in logs and history (required)")
	tenant := fs.String("tenant", "", "the tenant whose operations it may reach")
	roles := fs.String("roles", "agent", "comma-separated: agent, reconciler, operator, admin, metrics")
	appendTo := fs.String("append", "", "add the entry to this tokens file (created 0600 if missing) and print only the token")
	principal := fs.String("principal", "", "the caller the token belongs to (default: the name); a rotated token keeps its principal, so the gateway's keys stay the same")
	c := &cobra.Command{
		Use:   "token --name N [--principal P] [--tenant T] [--roles R] [--append FILE]",
		Short: "make a bearer token and its tokens-file entry",
		Long:  tokenLong,
		Example: `  opjournal token --name alice --tenant team-a --roles operator --append tokens.yaml
  TOKEN=$(opjournal token --name payments-agent --tenant payments --append tokens.yaml)
  opjournal token --name payments-agent --tenant payments --roles agent   # print the entry instead
  opjournal token --name agent-7-2026-12 --principal agent-7 --tenant payments --append tokens.yaml   # rotate agent-7's token`,
		RunE: func(*cobra.Command, []string) error {
			return tokenCmd(*name, *principal, *tenant, *roles, *appendTo, stdout, stderr)
		},
	}
	// As before, the token's flags are not read from the environment.
	withFlags(c, fs, false)
	_ = c.RegisterFlagCompletionFunc("roles", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return []cobra.Completion{"agent", "reconciler", "operator", "admin", "metrics"}, cobra.ShellCompDirectiveNoFileComp
	})
	return c
}

// opsCommand is package ops' command tree with the journal flags
// (--journal-addr, --token-file, --tls-ca, --timeout) on every subcommand.
func opsCommand() *cobra.Command {
	var jf cli.JournalFlags
	var timeout time.Duration
	cancel := context.CancelFunc(func() {})
	c := ops.NewCommand(func(context.Context) (pb.JournalServiceClient, func(), error) {
		conn, cc, err := jf.Dial()
		if err != nil {
			return nil, nil, fmt.Errorf("ops: %w", err)
		}
		return pb.NewJournalServiceClient(cc), func() { conn.Close(); cancel() }, nil
	})
	fs := c.PersistentFlags()
	jf.Register(fs)
	fs.DurationVar(&timeout, "timeout", 10*time.Second, "give up after this long")
	cli.MirrorEnv(fs)
	c.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		ctx, stop := context.WithTimeout(cmd.Context(), timeout)
		cancel = stop
		cmd.SetContext(ctx)
		return nil
	}
	return c
}
