// Package pgbouncer runs a real PgBouncer process in transaction pooling
// mode in front of a PostgreSQL server, for the tests (internal/testkit/pgtest)
// and the soak harness (opjournal-soak --pgbouncer).
//
// PgBouncer 1.18 (Debian bookworm) does not pass search_path through (it
// refuses the startup parameter, and in transaction mode a SET would stay
// on whichever server connection ran it), so each schema gets its own
// PgBouncer database: an alias of the server's database whose
// connect_query sets search_path on every server connection PgBouncer
// opens for it (AddDatabase). Server connections are never shared between
// aliases (PgBouncer pools per database and user), so a schema's
// statements always run with its search_path.
package pgbouncer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// DefaultBinary is where Debian's pgbouncer package installs it.
const DefaultBinary = "/usr/sbin/pgbouncer"

// AdminUser is the user of the admin console (database "pgbouncer").
const AdminUser = "pgbouncer"

// ExecMode is the pgx statement mode of the URLs this package returns
// (the store's choice behind a transaction pooler; store/postgres).
const ExecMode = "cache_describe"

// Options configure a PgBouncer process.
type Options struct {
	// Binary is the pgbouncer executable (DefaultBinary, else PATH's).
	Binary string
	// Server is the PostgreSQL server's URL; its host, port and database
	// are the target of every alias, its user the one clients connect as.
	Server string
	// Dir receives the configuration, the auth file and the log. It must
	// exist; Start makes it the process's own when it changes user.
	Dir string
	// PoolSize is each alias's pool (default_pool_size; 0: 10).
	PoolSize int
	// MaxServerConns caps the server connections of all aliases together
	// (max_user_connections: every alias connects as the same user); when
	// it is reached PgBouncer closes an idle connection of another alias
	// first. 0: 20, a fifth of a default server's max_connections (100),
	// which the tests running beside it share.
	MaxServerConns int
}

// Bouncer is a running PgBouncer.
type Bouncer struct {
	addr    string
	dir     string
	server  *neturl.URL
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error

	mu      sync.Mutex // serialises AddDatabase's file writes and reloads
	aliases []string
}

// Addr returns the host:port PgBouncer listens on.
func (b *Bouncer) Addr() string { return b.addr }

// Pid returns PgBouncer's process id.
func (b *Bouncer) Pid() int { return b.cmd.Process.Pid }

// LogPath returns PgBouncer's log file.
func (b *Bouncer) LogPath() string { return filepath.Join(b.dir, "pgbouncer.log") }

var aliasRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Binary returns the pgbouncer executable to run, or an error that says
// how to install it.
func Binary(path string) (string, error) {
	if path != "" {
		return path, nil
	}
	if _, err := os.Stat(DefaultBinary); err == nil {
		return DefaultBinary, nil
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	return "", errors.New("pgbouncer is not installed (Debian: apt-get install pgbouncer; scripts/deps.sh installs it)")
}

// Start starts PgBouncer in transaction pooling mode on a free port of
// 127.0.0.1 and waits until its admin console answers. It fails when the
// binary is missing, the server URL is not a postgres:// URL, or the
// process exits or stays silent for 15 s. PgBouncer refuses to run as
// root; under root Start runs it as the user postgres (else nobody).
func Start(ctx context.Context, o Options) (*Bouncer, error) {
	bin, err := Binary(o.Binary)
	if err != nil {
		return nil, err
	}
	srv, err := neturl.Parse(o.Server)
	if err != nil || (srv.Scheme != "postgres" && srv.Scheme != "postgresql") || srv.Hostname() == "" {
		return nil, fmt.Errorf("pgbouncer: the server must be a postgres:// URL with a host, not %q", redact(o.Server))
	}
	if o.Dir == "" {
		return nil, errors.New("pgbouncer: Options.Dir is required")
	}
	if o.PoolSize <= 0 {
		o.PoolSize = 10
	}
	if o.MaxServerConns <= 0 {
		o.MaxServerConns = 20
	}
	clientUser := srv.User.Username()
	if clientUser == "" {
		clientUser = "postgres"
	}
	// The port is chosen here and given to PgBouncer, which cannot report
	// one the kernel picked; another process may take it in between, so a
	// start whose listen fails is tried again on another port.
	var lastErr error
	for range 3 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		b, err := start(ctx, bin, o, srv, clientUser, port)
		if err == nil {
			return b, nil
		}
		lastErr = err
		if !strings.Contains(err.Error(), "Address already in use") {
			break
		}
	}
	return nil, lastErr
}

func start(ctx context.Context, bin string, o Options, srv *neturl.URL, clientUser string, port int) (*Bouncer, error) {
	b := &Bouncer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: o.Dir, server: srv, done: make(chan struct{})}
	// Every client user must be listed in the auth file, even with trust.
	users := fmt.Sprintf("%q \"\"\n%q \"\"\n", clientUser, AdminUser)
	if err := os.WriteFile(filepath.Join(o.Dir, "users.txt"), []byte(users), 0o644); err != nil {
		return nil, fmt.Errorf("pgbouncer: %w", err)
	}
	if err := os.WriteFile(filepath.Join(o.Dir, "databases.ini"), nil, 0o644); err != nil {
		return nil, fmt.Errorf("pgbouncer: %w", err)
	}
	// Why each setting:
	//   pool_mode = transaction: what is under test; a server connection is
	//     a client's only for one transaction (or one statement outside).
	//   auth_type = trust: the test server trusts 127.0.0.1 too.
	//   unix_socket_dir empty: TCP only, nothing outside Dir.
	//   server_idle_timeout: each alias is a pool of its own; idle
	//     connections of finished tests go within seconds, not 10 minutes.
	//   stats_period = 1: SHOW STATS totals (the tests' proof that traffic
	//     went through PgBouncer) are refreshed every second.
	//   no ignore_startup_parameters: a parameter PgBouncer cannot carry
	//     (search_path, enable_seqscan, ...) is refused loudly instead of
	//     being dropped silently.
	ini := fmt.Sprintf(`[databases]
%%include %s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
admin_users = %s
stats_users = %s
pool_mode = transaction
default_pool_size = %d
max_user_connections = %d
max_client_conn = 2000
server_idle_timeout = 5
server_lifetime = 3600
stats_period = 1
logfile = %s
log_connections = 0
log_disconnections = 0
`, filepath.Join(o.Dir, "databases.ini"), port, filepath.Join(o.Dir, "users.txt"), AdminUser, AdminUser,
		o.PoolSize, o.MaxServerConns, b.LogPath())
	iniPath := filepath.Join(o.Dir, "pgbouncer.ini")
	if err := os.WriteFile(iniPath, []byte(ini), 0o644); err != nil {
		return nil, fmt.Errorf("pgbouncer: %w", err)
	}
	cmd := exec.Command(bin, iniPath)
	var stderr lockedBuffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	// Its own process group: a signal to the test's group does not reach
	// it first, and Close ends exactly this process. Pdeathsig: a test
	// binary killed by its timeout takes PgBouncer with it instead of
	// leaving it listening (Go sets it after the change of user).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if os.Geteuid() == 0 {
		cred, err := unprivileged(o.Dir)
		if err != nil {
			return nil, err
		}
		cmd.SysProcAttr.Credential = cred
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("pgbouncer: start %s: %w", bin, err)
	}
	b.cmd = cmd
	go func() { b.waitErr = cmd.Wait(); close(b.done) }()

	// Ready when the admin console answers: polled, since PgBouncer says
	// nothing machine-readable when it listens.
	deadline := time.Now().Add(15 * time.Second)
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 200*time.Millisecond) {
		select {
		case <-b.done:
			return nil, fmt.Errorf("pgbouncer exited at start (%v): %s%s", b.waitErr, stderr.String(), b.logTail())
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := b.adminExec(cctx, "SHOW VERSION")
		cancel()
		if err == nil {
			return b, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = b.Close()
			return nil, fmt.Errorf("pgbouncer not ready on %s after 15 s: %v\n%s%s", b.addr, err, stderr.String(), b.logTail())
		}
		time.Sleep(pause)
	}
}

// unprivileged returns the credentials of the user postgres (else nobody)
// and hands dir to that user.
func unprivileged(dir string) (*syscall.Credential, error) {
	var u *user.User
	var err error
	for _, name := range []string{"postgres", "nobody"} {
		if u, err = user.Lookup(name); err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("pgbouncer refuses to run as root, and there is no user postgres or nobody to run it as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(p, uid, gid)
	}); err != nil {
		return nil, fmt.Errorf("pgbouncer: hand %s to %s: %w", dir, u.Username, err)
	}
	// The directory's parents (a test's TempDir is 0700) must let it in.
	for p := filepath.Dir(dir); p != "/" && p != "."; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil || st.Mode().Perm()&0o001 != 0 {
			continue
		}
		if err := os.Chmod(p, st.Mode().Perm()|0o711); err != nil {
			return nil, fmt.Errorf("pgbouncer: let %s into %s: %w", u.Username, p, err)
		}
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// URL returns a client URL of alias through PgBouncer, with pgx in the
// statement mode that works through a transaction pooler (ExecMode).
func (b *Bouncer) URL(alias string) string {
	u := neturl.URL{Scheme: "postgres", User: b.server.User, Host: b.addr, Path: "/" + alias}
	q := neturl.Values{}
	q.Set("sslmode", "disable")
	q.Set("default_query_exec_mode", ExecMode)
	u.RawQuery = q.Encode()
	return u.String()
}

// AddDatabase adds the PgBouncer database alias, whose server
// connections use schema (connect_query sets search_path), and reloads
// the configuration. It returns the client URL (URL). The schema must
// exist; alias and schema must be lower-case identifiers.
func (b *Bouncer) AddDatabase(ctx context.Context, alias, schema string) (string, error) {
	if !aliasRE.MatchString(alias) || !aliasRE.MatchString(schema) {
		return "", fmt.Errorf("pgbouncer: alias %q and schema %q must be lower-case identifiers", alias, schema)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	host, port := b.server.Hostname(), b.server.Port()
	if port == "" {
		port = "5432"
	}
	db := strings.TrimPrefix(b.server.Path, "/")
	if db == "" {
		db = "postgres"
	}
	line := fmt.Sprintf("%s = host=%s port=%s dbname=%s connect_query='SET search_path = %s'\n", alias, host, port, db, schema)
	f, err := os.OpenFile(filepath.Join(b.dir, "databases.ini"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return "", fmt.Errorf("pgbouncer: %w", err)
	}
	_, werr := f.WriteString(line)
	if err := errors.Join(werr, f.Close()); err != nil {
		return "", fmt.Errorf("pgbouncer: %w", err)
	}
	if err := b.adminExec(ctx, "RELOAD"); err != nil {
		return "", fmt.Errorf("pgbouncer: reload: %w", err)
	}
	b.aliases = append(b.aliases, alias)
	return b.URL(alias), nil
}

// Kill closes every client and server connection of alias (the admin
// console's KILL), e.g. once a test is done with its schema.
func (b *Bouncer) Kill(ctx context.Context, alias string) error {
	if !aliasRE.MatchString(alias) {
		return fmt.Errorf("pgbouncer: bad alias %q", alias)
	}
	return b.adminExec(ctx, "KILL "+alias)
}

// Stats are one database's counters of SHOW STATS (refreshed every
// second: stats_period).
type Stats struct {
	Database                 string
	TotalXacts, TotalQueries int64
}

// Stats returns SHOW STATS, one row per database alias.
func (b *Bouncer) Stats(ctx context.Context) (map[string]Stats, error) {
	conn, err := b.admin(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, "SHOW STATS")
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: show stats: %w", err)
	}
	defer rows.Close()
	col := map[string]int{}
	for i, f := range rows.FieldDescriptions() {
		col[f.Name] = i
	}
	for _, want := range []string{"database", "total_xact_count", "total_query_count"} {
		if _, ok := col[want]; !ok {
			return nil, fmt.Errorf("pgbouncer: SHOW STATS has no column %s", want)
		}
	}
	out := map[string]Stats{}
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, err
		}
		s := Stats{Database: fmt.Sprint(vals[col["database"]])}
		s.TotalXacts = toInt64(vals[col["total_xact_count"]])
		s.TotalQueries = toInt64(vals[col["total_query_count"]])
		out[s.Database] = s
	}
	return out, rows.Err()
}

// admin connects to the admin console, which speaks only the simple
// query protocol.
func (b *Bouncer) admin(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(fmt.Sprintf("postgres://%s@%s/pgbouncer?sslmode=disable&default_query_exec_mode=simple_protocol", AdminUser, b.addr))
	if err != nil {
		return nil, err
	}
	return pgx.ConnectConfig(ctx, cfg)
}

func (b *Bouncer) adminExec(ctx context.Context, cmd string) error {
	conn, err := b.admin(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, cmd)
	return err
}

// Close stops PgBouncer (SIGTERM: immediate shutdown; SIGKILL after 5 s)
// and waits for it to exit.
func (b *Bouncer) Close() error {
	if b.cmd == nil || b.cmd.Process == nil {
		return nil
	}
	select {
	case <-b.done:
		return nil
	default:
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(5 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
	}
	return nil
}

// Exited reports whether the process has exited.
func (b *Bouncer) Exited() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// logTail is the end of PgBouncer's log, for an error message.
func (b *Bouncer) logTail() string {
	data, err := os.ReadFile(b.LogPath())
	if err != nil || len(data) == 0 {
		return ""
	}
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return "\npgbouncer.log:\n" + string(data)
}

// toInt64 reads a SHOW STATS counter: PgBouncer types them numeric.
func toInt64(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case pgtype.Numeric:
		i, err := n.Int64Value()
		if err != nil {
			return -1
		}
		return i.Int64
	default:
		i, _ := strconv.ParseInt(fmt.Sprint(v), 10, 64)
		return i
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgbouncer: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func redact(s string) string {
	u, err := neturl.Parse(s)
	if err != nil {
		return "(unparsable)"
	}
	return u.Redacted()
}

// lockedBuffer is PgBouncer's stdout and stderr (written by exec's
// copying goroutine, read on failure).
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
