// Command opjournal runs the operation journal service.
//
//	opjournal serve       run the gRPC and REST listeners
//	opjournal migrate     apply database migrations and exit
//	opjournal ops         operators' tools: review queue, history, resolve, acknowledge, release
//	opjournal budgets     the budgets' counters: what each holds of its limit, per scope
//	opjournal token       make a bearer token and its tokens-file entry (--append FILE)
//	opjournal purge       delete terminal operations older than their retention
//	opjournal hashkey     make or rotate a request-hash key file
//	opjournal completion  print a shell completion script (bash, zsh, fish)
//	opjournal version     print the version
//
// Every command has --help with examples, and its flags may come anywhere
// after it (commands.go). Every flag can also be set by an environment
// variable: --database-url is OPJOURNAL_DATABASE_URL, --grpc-addr is
// OPJOURNAL_GRPC_ADDR, and so on; a flag on the command line wins over the
// variable.
package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/internal/cli"
	"github.com/opjournal/opjournal/internal/cli/purgeprint"
	"github.com/opjournal/opjournal/internal/hostcheck"
	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/journal/webhook"
	"github.com/opjournal/opjournal/protocol/hashkey"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/server/auth"
	"github.com/opjournal/opjournal/store"
	"github.com/opjournal/opjournal/store/postgres"
	"github.com/opjournal/opjournal/store/sqlite"
)

func main() {
	cli.Exit("opjournal", run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// serve's garbage-collector settings unless GOGC or GOMEMLIMIT is set.
const (
	defaultGOGC        = 400
	defaultMemoryLimit = 64 << 20
)

type options struct {
	databaseURL     string
	grpcAddr        string
	httpAddr        string
	policyPath      string
	maxPayloadBytes int
	maxResultBytes  int
	replayCacheSize int
	adaptiveProcs   bool
	authFile        string
	insecureOK      bool
	noConsole       bool
	tlsCert         string
	tlsKey          string
	rateLimit       float64
	rateBurst       int
	logLevel        string
	logFormat       string
	pprofAddr       string
	hashKeyFile     string
	metricsAddr     string
	purgeInterval   time.Duration
	approvalSweep   time.Duration
	databaseWait    time.Duration
	purgeBatch      int
	purgePause      time.Duration
	allowedHosts    hostList
	publicURL       string
	trustProxy      bool
	webhookSecrets  string
}

// hostList is --allowed-hosts: repeatable, and each value may list
// several names separated by commas (as OPJOURNAL_ALLOWED_HOSTS does).
type hostList []string

func (h *hostList) String() string { return strings.Join(*h, ",") }

// Type names the value in --help ("--allowed-hosts host").
func (h *hostList) Type() string { return "host" }

// Set adds the names of v, refusing what is not a host name or host:port.
func (h *hostList) Set(v string) error {
	for _, name := range strings.Split(v, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if strings.Contains(name, "/") || !validHost(name) {
			return fmt.Errorf("%q is not a host name (give journal.internal or journal.internal:8080, without a scheme or path)", name)
		}
		*h = append(*h, name)
	}
	return nil
}

// validHost reports whether s is a name or IP literal, with or without a
// port, as a Host header would carry it.
func validHost(s string) bool {
	host := s
	if h, p, err := net.SplitHostPort(s); err == nil {
		if p == "" {
			return false
		}
		host = h
	} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		host = s[1 : len(s)-1]
	}
	if net.ParseIP(host) != nil {
		return true
	}
	for _, label := range strings.Split(strings.TrimSuffix(host, "."), ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

func flags(name string, stderr io.Writer, o *options, serveFlags bool) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.databaseURL, "database-url", "sqlite://opjournal.db", "PostgreSQL as postgres://… (several hosts: postgres://u@db1,db2/j?target_session_attrs=read-write) or as keyword/value pairs (host=db1,db2 dbname=j …), or sqlite://PATH for the embedded store")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "json", "json or text")
	if serveFlags {
		fs.StringVar(&o.grpcAddr, "grpc-addr", "127.0.0.1:9090", "gRPC listen address")
		fs.StringVar(&o.httpAddr, "http-addr", "127.0.0.1:8080", "HTTP (REST, the console at /console/, /metrics, /openapi.json) listen address")
		fs.BoolVar(&o.noConsole, "no-console", false, "do not serve the operators' console (/console/) on --http-addr")
		fs.IntVar(&o.maxPayloadBytes, "max-payload-bytes", journal.DefaultLimits.MaxPayloadBytes, "largest payload, as canonical JSON bytes")
		fs.IntVar(&o.maxResultBytes, "max-result-bytes", journal.DefaultLimits.MaxResultBytes, "largest result, as canonical JSON bytes")
		fs.BoolVar(&o.adaptiveProcs, "adaptive-gomaxprocs", true, "run on one CPU (GOMAXPROCS=1) while serving one call at a time, the default CPUs as soon as a second call is in flight (false: always the default)")
		fs.IntVar(&o.replayCacheSize, "replay-cache-size", journal.DefaultReplayCacheSize, "terminal operations kept in memory to answer replays without a database read (0: off)")
		fs.StringVar(&o.authFile, "auth-file", "", "tokens file (YAML of token digests, tenants and roles); without it every caller is the default tenant with every role")
		fs.BoolVar(&o.insecureOK, "insecure", false, "allow listening on a non-loopback address without --auth-file")
		fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate: serve both listeners over TLS (with --tls-key)")
		fs.StringVar(&o.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
		fs.Float64Var(&o.rateLimit, "rate-limit", 0, "requests per second per principal, all of its tokens together (0: unlimited); over it: RESOURCE_EXHAUSTED / HTTP 429")
		fs.IntVar(&o.rateBurst, "rate-burst", 0, "burst size of --rate-limit (default: one second's worth)")
		fs.StringVar(&o.pprofAddr, "pprof-addr", "", "serve Go's /debug/pprof on this loopback address (off by default; for profiling)")
		fs.StringVar(&o.hashKeyFile, "hash-key-file", "", "request-hash keys for actions with redact_fields (opjournal hashkey); default: $OPJOURNAL_HASH_KEYS, or on SQLite a file beside the database, created on first start")
		fs.StringVar(&o.metricsAddr, "metrics-addr", "", "serve /metrics on this address, without a token, instead of on --http-addr (where it needs an admin or metrics token when --auth-file is set)")
		fs.Var(&o.allowedHosts, "allowed-hosts", "a host name (or name:port) requests may address besides localhost, 127.0.0.1 and [::1]; repeat or separate with commas. Without --auth-file every other Host (HTTP) or :authority (gRPC) is refused, against DNS rebinding; with --auth-file the check is off unless this is given")
		fs.StringVar(&o.publicURL, "public-url", "", "the console's external URL (https://journal.example) when a proxy serves it; an https URL makes the console's session cookie Secure")
		fs.BoolVar(&o.trustProxy, "trust-proxy-headers", false, "trust X-Forwarded-Proto from the proxy in front (https makes the console's cookie Secure); only behind a proxy that sets it, as any client can send it")
		fs.DurationVar(&o.approvalSweep, "approval-sweep-interval", 5*time.Second, "apply the timeout (on_timeout) of approvals whose deadline has passed this often (0: never; several servers may sweep at once)")
		fs.DurationVar(&o.databaseWait, "database-wait", 60*time.Second, "at start-up, wait this long for PostgreSQL to accept writes (not up yet, no primary elected yet), trying every second; 0: exit at once")
		fs.StringVar(&o.webhookSecrets, "webhook-secret-file", "", "the approval webhooks' signing secrets (Standard Webhooks): one whsec_… per line, the current one first; each delivery is signed with every one, for rotation. Required when an action's approval has notify")
		fs.DurationVar(&o.purgeInterval, "purge-interval", 10*time.Minute, "delete terminal operations older than their action's retention this often (0: never; with several servers on one database, one purges at a time)")
	}
	if serveFlags || name == "purge" {
		fs.StringVar(&o.policyPath, "policy", "", "policy YAML file (default: the shipped policy with create_payment, send_email, submit_application, create_ticket)")
		fs.IntVar(&o.purgeBatch, "purge-batch", journal.DefaultPurgeBatch, "operations deleted per statement when purging (small batches hold no lock for long)")
		fs.DurationVar(&o.purgePause, "purge-pause", journal.DefaultPurgePause, "pause between purge batches, leaving the database to other work (0: flat out)")
	}
	return fs
}

// loadPolicy is the shipped policy, or the file given.
func loadPolicy(path string) (*policy.Policy, error) {
	if path == "" {
		return policy.Default(), nil
	}
	return policy.Load(path)
}

// hashKeys finds the keys of the keyed request hash (package hashkey):
// --hash-key-file, else $OPJOURNAL_HASH_KEYS, else, for the embedded store
// only, a key file beside the database, made on the first start. Several
// replicas on PostgreSQL must share their keys, so there one must be
// given, unless no action redacts anything.
func hashKeys(path, databaseURL string, pol *policy.Policy, log *slog.Logger) (*hashkey.Ring, error) {
	if path != "" {
		return hashkey.Load(path)
	}
	if env := os.Getenv("OPJOURNAL_HASH_KEYS"); env != "" {
		return hashkey.FromEnv(env)
	}
	var redacting []string
	for _, name := range pol.Names() {
		if a, _ := pol.Action(name); len(a.RedactFields) > 0 {
			redacting = append(redacting, name)
		}
	}
	if len(redacting) == 0 {
		return nil, nil
	}
	kind, target, err := splitURL(databaseURL)
	if err != nil {
		return nil, err
	}
	if kind == "postgres" {
		return nil, fmt.Errorf("the policy redacts fields of %s, whose request hash is keyed so that nobody can confirm a guess of a redacted value: give the key file every replica shares with --hash-key-file (make one with `opjournal hashkey > hashkeys.yaml; chmod 600 hashkeys.yaml`) or OPJOURNAL_HASH_KEYS", strings.Join(redacting, ", "))
	}
	keyPath := target + ".hashkeys"
	r, created, err := hashkey.LoadOrCreate(keyPath)
	if err != nil {
		return nil, err
	}
	if created {
		log.Warn("created a request-hash key file beside the database; keep it with the database (replays of operations hashed under it need it)", "hash_key_file", keyPath)
	}
	return r, nil
}

// webhookSecrets loads the approval webhooks' signing secrets when an
// action's approval has notify (nil when none has). Deliveries are always
// signed, so such a policy without --webhook-secret-file is a usage error.
func webhookSecrets(path string, pol *policy.Policy, log *slog.Logger) ([]webhook.Secret, error) {
	notifying := webhook.NotifyingActions(pol)
	if len(notifying) == 0 {
		if path != "" {
			log.Warn("--webhook-secret-file is given, but no action's approval has notify: no webhook is sent")
		}
		return nil, nil
	}
	if path == "" {
		return nil, cli.Usage(fmt.Errorf("the approval of %s has notify, and its webhooks are signed: give --webhook-secret-file FILE, "+
			"one whsec_ secret per line (make one with: printf 'whsec_%%s\\n' \"$(head -c 32 /dev/urandom | base64)\" > FILE; chmod 600 FILE)",
			strings.Join(notifying, ", ")))
	}
	return webhook.LoadSecrets(path)
}

// hashkeyCmd prints a new request-hash key file, or rotates one: a new
// current key goes first and the old keys stay to verify their
// operations.
func hashkeyCmd(id, rotate *string, stdout io.Writer) error {
	if *id == "" {
		*id = fmt.Sprintf("k%d", time.Now().Unix())
	}
	k := hashkey.Random(*id)
	if *rotate == "" {
		_, err := io.WriteString(stdout, hashkey.Header+k.Entry())
		return err
	}
	return hashkey.Rotate(*rotate, k)
}

// servePprof serves Go's profiler on its own listener until ctx is done.
// Profiles reveal nothing of the journal's data, but they are an operator's
// tool, so only a loopback address is accepted, and (it has no
// authentication) only requests addressed to a loopback name or one of
// allowed: a web page must not read it through a rebound DNS name.
func servePprof(ctx context.Context, addr string, allowed []string, log *slog.Logger) error {
	if !loopback(addr) {
		return fmt.Errorf("--pprof-addr %s: only a loopback address is accepted", addr)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--pprof-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: hostcheck.Loopback(allowed)(mux), ReadHeaderTimeout: 10 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	go func() { _ = srv.Serve(lis) }()
	log.Info("pprof listening", "pprof_addr", lis.Addr().String())
	return nil
}

// loopback reports whether addr (host:port) listens only on this machine.
// An empty host means every interface.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// tokenCmd makes a new random token and prints it, once, on stdout. With
// appendTo it adds the token's entry (which holds only its SHA-256) to
// that tokens file, creating it 0600 if missing, and stdout has nothing but
// the token; without, it prints the entry, as a tokens file holds it,
// after the token.
func tokenCmd(name, principal, tenant, rolesList, appendTo string, stdout, stderr io.Writer) error {
	if name == "" {
		return errors.New("token: --name is required")
	}
	roles, err := auth.ParseRoles(rolesList)
	if err != nil {
		return fmt.Errorf("token: --roles: %w", err)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	tok := "opj_" + base64.RawURLEncoding.EncodeToString(b[:])
	e := auth.NewEntry(name, tok, tenant, roles)
	e.Principal = principal
	if err := e.Validate(); err != nil {
		return fmt.Errorf("token: %w", err)
	}
	if appendTo != "" {
		created, err := auth.AppendEntry(appendTo, e)
		if err != nil {
			return fmt.Errorf("token: %w", err)
		}
		if _, err := fmt.Fprintln(stdout, tok); err != nil {
			return err
		}
		names := make([]string, len(roles))
		for i, r := range roles {
			names[i] = string(r)
		}
		what := fmt.Sprintf("%s (tenant %q, roles %s)", name, tenant, strings.Join(names, ","))
		if created {
			fmt.Fprintf(stderr, "opjournal token: created %s (0600) with %s", appendTo, what)
		} else {
			fmt.Fprintf(stderr, "opjournal token: added %s to %s", what, appendTo)
		}
		fmt.Fprint(stderr, ". The token on stdout is stored nowhere: give it to the caller now. The server reads --auth-file when it starts: restart it.\n")
		return nil
	}
	_, err = fmt.Fprintf(stdout, "# the token (give it to the caller; it is not stored anywhere):\n%s\n\n"+
		"# its entry in the tokens file (--auth-file). A new file starts with the tokens: line;\n"+
		"# in an existing one, add the entry under its tokens: list (or use --append FILE):\n%s%s",
		tok, auth.FileHeader, e.YAML())
	return err
}

// purgeCmd deletes (or with --dry-run counts) the terminal operations
// older than their action's retention, and prints what it did. It waits
// up to --lock-timeout for a server that is purging the same database.
func purgeCmd(ctx context.Context, o *options, p *purgeFlags, stdout, stderr io.Writer) error {
	dryRun, action, lockTimeout := &p.dryRun, &p.action, &p.lockTimeout
	if o.purgeBatch < 1 || o.purgePause < 0 {
		return errors.New("purge: --purge-batch must be at least 1 and --purge-pause not negative")
	}
	pol, err := loadPolicy(o.policyPath)
	if err != nil {
		return err
	}
	if kind, target, err := splitURL(o.databaseURL); err != nil {
		return err
	} else if _, statErr := os.Stat(target); kind == "sqlite" && statErr != nil {
		return fmt.Errorf("purge: no journal at %s: %w", target, statErr)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	st, err := openStore(ctx, o.databaseURL)
	if err != nil {
		return err
	}
	defer st.Close()
	svc := journal.New(st, pol, journal.Limits{})
	last := time.Now()
	opts := journal.PurgeOptions{Action: *action, DryRun: *dryRun, BatchSize: o.purgeBatch, Pause: o.purgePause,
		Progress: func(r journal.PurgeReport) {
			if time.Since(last) >= 2*time.Second {
				last = time.Now()
				fmt.Fprintf(stderr, "purge: %s: %d operations removed so far\n", r.Action, r.Operations)
			}
		}}
	start := time.Now()
	deadline := start.Add(*lockTimeout)
	for {
		reports, err := svc.Purge(ctx, opts)
		if errors.Is(err, journal.ErrPurgeBusy) && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(500 * time.Millisecond):
				continue
			}
		}
		if errors.Is(err, journal.ErrPurgeBusy) {
			return fmt.Errorf("purge: %w (waited %s; try again, or give a longer --lock-timeout)", err, *lockTimeout)
		}
		if *p.output == cli.OutputJSON {
			if jerr := purgeprint.JSON(stdout, reports, *dryRun); jerr != nil && err == nil {
				err = jerr
			}
		} else {
			purgeprint.Print(stdout, reports, *dryRun, time.Since(start))
		}
		if err != nil {
			return fmt.Errorf("purge: %w", err)
		}
		return nil
	}
}

func migrateCmd(o *options, stderr io.Writer) error {
	kind, target, err := splitURL(o.databaseURL)
	if err != nil {
		return err
	}
	if kind == "postgres" {
		err = postgres.Migrate(target)
	} else {
		err = sqlite.Migrate(target)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "migrations applied to the %s store\n", kind)
	return nil
}

// databaseWaitLogEvery is how often openStoreWaiting says it is still
// waiting.
const databaseWaitLogEvery = 5 * time.Second

// openStoreWaiting opens the store, and while PostgreSQL is unavailable
// (not up yet, or no host writable yet: a failover manager still electing
// its leader) tries again every second for up to wait, logging every few
// seconds the hosts it tries. A service started beside its database,
// as Kubernetes starts them, waits for it rather than exiting into a
// restart loop. Any other error (a bad URL, a wrong password, a missing
// database) ends it at once, as does wait 0.
func openStoreWaiting(ctx context.Context, url string, wait time.Duration, log *slog.Logger) (store.Store, error) {
	start := time.Now()
	lastLog := start
	for {
		st, err := openStore(ctx, url)
		if err == nil || opjournal.ErrorCode(err) != opjournal.CodeUnavailable || storeKind(url) != "postgres" {
			return st, err
		}
		waited := time.Since(start)
		if waited >= wait {
			if wait > 0 {
				// The time really waited: the last attempt may have
				// outlived the wait by up to its connect_timeout (a host
				// that accepts connections but never answers).
				return nil, fmt.Errorf("%w (waited %s for a writable host, --database-wait %s)", err, waited.Round(time.Second), wait)
			}
			return nil, err
		}
		if time.Since(lastLog) >= databaseWaitLogEvery || waited < time.Second {
			lastLog = time.Now()
			log.Warn("waiting for the database", "hosts", strings.Join(postgres.Hosts(url), ","), "waited", waited.Round(time.Second).String(),
				"wait", wait.String(), "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(min(time.Second, wait-waited)):
		}
	}
}

// openStore opens the store a database URL names.
func openStore(ctx context.Context, url string) (store.Store, error) {
	kind, target, err := splitURL(url)
	if err != nil {
		return nil, err
	}
	if kind == "postgres" {
		return postgres.Open(ctx, target)
	}
	return sqlite.Open(ctx, target)
}

func splitURL(url string) (kind, target string, err error) {
	switch {
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"), postgres.IsKeywordValue(url):
		return "postgres", url, nil
	case strings.HasPrefix(url, "sqlite://"):
		path := strings.TrimPrefix(url, "sqlite://")
		if path == "" {
			return "", "", errors.New("--database-url: sqlite:// needs a file path, e.g. sqlite://opjournal.db")
		}
		return "sqlite", path, nil
	}
	return "", "", errors.New("--database-url: want postgres://…, postgresql://…, the keyword/value form (host=db1,db2 dbname=opjournal …) or sqlite://PATH")
}

func storeKind(url string) string {
	k, _, _ := splitURL(url)
	return k
}

// buildVersion is set by a release build (go build -ldflags "-X
// main.buildVersion=v1.2.3"); otherwise cli.Version shows the module
// version and the VCS stamp Go records.
var buildVersion = ""
