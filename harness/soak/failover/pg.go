package failover

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opjournal/opjournal/internal/testkit/tcpproxy"
)

// pgNode is one PostgreSQL server of the pair: its data directory, its
// port (the same for its whole life, so the journal's multi-host URL never
// changes) and the TCP proxy in front of it through which the other node's
// walreceiver streams from it while it is the primary.
type pgNode struct {
	name  string // "node-a", "node-b": also the standby's application_name
	dir   string // data directory
	sock  string // unix socket directory (its lock file outlives a kill -9)
	log   string // server log
	port  int
	proxy *tcpproxy.Proxy // to 127.0.0.1:port, for replication only
}

// pgPair is a primary and a streaming standby run from Debian's
// PostgreSQL binaries, with the harness as their failover manager.
type pgPair struct {
	bin     string // /usr/lib/postgresql/15/bin
	root    string // everything lives under it
	nodes   [2]*pgNode
	primary int  // index of the current primary
	sync    bool // synchronous_standby_names = '*' while the standby is streaming
	asUser  bool // run the binaries as the postgres user (we are root)
	say     func(format string, args ...any)
}

// newPair lays out two nodes under root on free ports. Nothing runs yet.
func newPair(bin, root string, sync bool, say func(string, ...any)) (*pgPair, error) {
	p := &pgPair{bin: bin, root: root, sync: sync, say: say, asUser: os.Geteuid() == 0}
	for i, name := range []string{"node-a", "node-b"} {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		n := &pgNode{name: name, dir: filepath.Join(root, name), sock: filepath.Join(root, name+"-sock"),
			log: filepath.Join(root, name+".log"), port: port}
		if err := os.MkdirAll(n.sock, 0o755); err != nil {
			return nil, err
		}
		px, err := tcpproxy.Listen(fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			return nil, err
		}
		n.proxy = px
		p.nodes[i] = n
	}
	if p.asUser {
		if err := chownPostgres(root); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// freePort returns a port that nothing listens on right now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// chownPostgres gives dir (recursively) to the postgres user: initdb and
// the server refuse to run as root.
func chownPostgres(dir string) error {
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("failover: running as root needs a postgres user (Debian's postgresql package creates it): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
}

func (p *pgPair) primaryNode() *pgNode { return p.nodes[p.primary] }
func (p *pgPair) standbyNode() *pgNode { return p.nodes[1-p.primary] }

// run runs one PostgreSQL binary (as postgres when we are root) and
// returns its output in the error when it fails.
func (p *pgPair) run(ctx context.Context, name string, args ...string) error {
	path := filepath.Join(p.bin, name)
	var cmd *exec.Cmd
	if p.asUser {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// serverConf is appended to the primary's postgresql.conf before its first
// start; pg_basebackup copies it to every standby, so both nodes run the
// same settings. Port and socket are given on the command line instead
// (they are per node). fsync stays on: a kill -9 of the processes keeps
// the page cache anyway, so it would not change what survives, only hide
// the cost a real deployment pays.
const serverConf = `
# opjournal-soak-failover
listen_addresses = '127.0.0.1'
wal_level = replica
max_wal_senders = 8
wal_keep_size = '256MB'
hot_standby = on
wal_receiver_status_interval = '1s'
wal_sender_timeout = '10s'
wal_receiver_timeout = '10s'
# A standby whose primary died retries every wal_retrieve_retry_interval
# (5 s by default) and a promotion can wait out that pause.
wal_retrieve_retry_interval = '200ms'
max_connections = 100
`

// initPrimary creates node 0 as the first primary and starts it.
func (p *pgPair) initPrimary(ctx context.Context) error {
	n := p.nodes[0]
	p.primary = 0
	if err := p.run(ctx, "initdb", "-D", n.dir, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(n.dir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(serverConf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := p.start(ctx, n); err != nil {
		return err
	}
	// Asynchronous until a standby streams: with '*' and no standby every
	// commit would wait.
	return p.setSyncNames(ctx, n, "")
}

// start starts a node's server and waits until it accepts connections.
func (p *pgPair) start(ctx context.Context, n *pgNode) error {
	// A kill -9 leaves the socket's lock file behind; the next start
	// would refuse to run ("another postmaster").
	if ents, err := os.ReadDir(n.sock); err == nil {
		for _, e := range ents {
			_ = os.Remove(filepath.Join(n.sock, e.Name()))
		}
	}
	return p.run(ctx, "pg_ctl", "-D", n.dir, "-l", n.log, "-w", "-t", "120",
		"-o", fmt.Sprintf("-c port=%d -c unix_socket_directories=%s", n.port, n.sock), "start")
}

// kill crashes a node: SIGKILL to the postmaster and to every one of its
// processes at once, as a power cut would stop them (not one by one, which
// would let the postmaster see its children die and clean up). It returns
// once none of them is alive.
func (p *pgPair) kill(n *pgNode) error {
	b, err := os.ReadFile(filepath.Join(n.dir, "postmaster.pid"))
	if err != nil {
		return fmt.Errorf("kill %s: %w", n.name, err)
	}
	pm, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		return fmt.Errorf("kill %s: postmaster.pid: %w", n.name, err)
	}
	pids := append([]int{pm}, childrenOf(pm)...)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("kill %s: process %d still alive after SIGKILL", n.name, pid)
			}
			time.Sleep(5 * time.Millisecond) // a dying process cannot be awaited: it is not our child
		}
	}
	return nil
}

// childrenOf lists the processes whose parent is pid (from /proc).
func childrenOf(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _, ok := procStat(c); ok && ppid == pid {
			out = append(out, c)
		}
	}
	return out
}

// procStat reads a process's parent and state from /proc/<pid>/stat.
func procStat(pid int) (ppid int, state byte, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	// "pid (comm) S ppid ...": comm may hold spaces; cut after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+4 >= len(b) {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[0][0], err == nil
}

// alive reports whether pid runs (a zombie, dead but not yet reaped by
// whoever is its parent, counts as dead).
func alive(pid int) bool {
	_, st, ok := procStat(pid)
	return ok && st != 'Z' && st != 'X'
}

// promote promotes a standby and waits until it is out of recovery.
func (p *pgPair) promote(ctx context.Context, n *pgNode) error {
	return p.run(ctx, "pg_ctl", "-D", n.dir, "-w", "-t", "60", "promote")
}

// rebuildStandby turns a crashed node into the standby of the current
// primary: a fresh pg_basebackup -R through the primary's proxy (the
// walreceiver then streams through it too), then a start. A fresh copy
// rather than pg_rewind: the journal's database is small, so it takes
// about a second, and it needs no wal_log_hints or checksums and no
// reasoning about the crashed node's diverged WAL.
func (p *pgPair) rebuildStandby(ctx context.Context, n *pgNode) error {
	if err := os.RemoveAll(n.dir); err != nil {
		return err
	}
	px := p.primaryNode().proxy
	host, port, _ := net.SplitHostPort(px.Addr())
	if err := p.run(ctx, "pg_basebackup", "-D", n.dir, "-R", "-X", "stream", "-c", "fast",
		"-d", fmt.Sprintf("host=%s port=%s user=postgres application_name=%s", host, port, n.name)); err != nil {
		return err
	}
	return p.start(ctx, n)
}

// connect opens a plain connection to one node (database postgres).
func (p *pgPair) connect(ctx context.Context, n *pgNode) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return pgx.Connect(cctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&application_name=opjournal-failoverctl", n.port))
}

// setSyncNames sets synchronous_standby_names on a node (ALTER SYSTEM,
// which a standby accepts too, then a reload) and waits until the server
// uses the new value.
func (p *pgPair) setSyncNames(ctx context.Context, n *pgNode, v string) error {
	conn, err := p.connect(ctx, n)
	if err != nil {
		return fmt.Errorf("%s: %w", n.name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = "+quoteLiteral(v)); err != nil {
		return fmt.Errorf("%s: alter system: %w", n.name, err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("%s: reload: %w", n.name, err)
	}
	// The reload is asynchronous; each new statement of this session sees
	// the configuration once the postmaster's SIGHUP reached it.
	return waitFor(ctx, 10*time.Second, n.name+" synchronous_standby_names = "+quoteLiteral(v), func() (bool, error) {
		var got string
		err := conn.QueryRow(ctx, "SHOW synchronous_standby_names").Scan(&got)
		return got == v, err
	})
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// replication is the standby as the primary sees it (pg_stat_replication).
type replication struct {
	state, syncState string
	lagBytes         int64 // sent but not yet replayed
}

// standbyState asks the primary about its standby ("" state: none).
func (p *pgPair) standbyState(ctx context.Context) (replication, error) {
	conn, err := p.connect(ctx, p.primaryNode())
	if err != nil {
		return replication{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var r replication
	err = conn.QueryRow(ctx, `SELECT state, sync_state, COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn), 0)::bigint
		FROM pg_stat_replication WHERE application_name = $1`, p.standbyNode().name).Scan(&r.state, &r.syncState, &r.lagBytes)
	if errors.Is(err, pgx.ErrNoRows) {
		return replication{}, nil
	}
	return r, err
}

// waitStandby waits until the standby streams (and, in sync mode, is the
// synchronous standby).
func (p *pgPair) waitStandby(ctx context.Context, within time.Duration) error {
	want := "streaming"
	if p.sync {
		want = "streaming and sync"
	}
	return waitFor(ctx, within, p.standbyNode().name+" "+want, func() (bool, error) {
		r, err := p.standbyState(ctx)
		if err != nil {
			return false, nil // the primary may be busy restarting; ask again
		}
		return r.state == "streaming" && (!p.sync || r.syncState == "sync"), nil
	})
}

// stop stops both servers at once (immediate: nothing is kept) and the
// proxies.
func (p *pgPair) stop() {
	for _, n := range p.nodes {
		if n == nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(n.dir, "postmaster.pid")); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = p.run(ctx, "pg_ctl", "-D", n.dir, "-m", "immediate", "-w", "stop")
			cancel()
		}
		n.proxy.Close()
	}
}

// waitFor polls cond until it holds, fails, or within passes.
func waitFor(ctx context.Context, within time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(within)
	pause := 5 * time.Millisecond
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("waiting for %s: %w", what, err)
			}
			return fmt.Errorf("waiting for %s: not after %s", what, within)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// waitReplayed waits until the standby has replayed everything the
// primary has written so far.
func (p *pgPair) waitReplayed(ctx context.Context, within time.Duration) error {
	conn, err := p.connect(ctx, p.primaryNode())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var lsn string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		return err
	}
	return waitFor(ctx, within, p.standbyNode().name+" replayed "+lsn, func() (bool, error) {
		var ok bool
		err := conn.QueryRow(ctx, `SELECT COALESCE(bool_or(replay_lsn >= $1::pg_lsn), false) FROM pg_stat_replication WHERE application_name = $2`,
			lsn, p.standbyNode().name).Scan(&ok)
		return ok, err
	})
}
