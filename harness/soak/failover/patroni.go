package failover

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
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

// patroniNode is one PostgreSQL server run by its own Patroni daemon. The
// journal connects to port directly; Patroni advertises the proxy's
// address as the node's connect_address, so the other nodes' replication,
// pg_rewind and pg_basebackup reach it through the proxy, which the async
// scenario stalls.
type patroniNode struct {
	name  string // "node-0" …: Patroni's member name
	dir   string // PostgreSQL's data directory (Patroni creates it)
	sock  string // unix socket directory
	conf  string // Patroni's YAML
	log   string // Patroni's and PostgreSQL's output
	port  int    // PostgreSQL
	api   int    // Patroni's REST API
	proxy *tcpproxy.Proxy

	cmd  *exec.Cmd     // the Patroni daemon; nil while stopped
	done chan struct{} // closed when it exited
}

// patroniCluster is three Patroni nodes and one etcd (v2 API), all on
// 127.0.0.1, under root. Patroni decides and promotes; the harness only
// injects faults and watches.
type patroniCluster struct {
	bin, root string
	sync      bool
	set       PatroniSettings
	cred      *syscall.Credential // the postgres user's, when we are root
	client    *http.Client

	etcdPort, etcdPeer int
	etcdDir, etcdLog   string
	etcd               *exec.Cmd
	etcdDone           chan struct{}
	nodes              [3]*patroniNode
}

// patroniMember is one member as GET /cluster describes it.
type patroniMember struct {
	Name     string `json:"name"`
	Role     string `json:"role"` // leader, replica, sync_standby, standby_leader
	State    string `json:"state"`
	Timeline int    `json:"timeline"`
}

// newPatroni lays the cluster out under root on free ports. Nothing runs
// yet.
func newPatroni(bin, root string, sync bool, set PatroniSettings) (*patroniCluster, error) {
	c := &patroniCluster{bin: bin, root: root, sync: sync, set: set,
		client: &http.Client{Timeout: 3 * time.Second}, etcdDir: filepath.Join(root, "etcd"), etcdLog: filepath.Join(root, "etcd.log")}
	var err error
	if c.etcdPort, err = freePort(); err != nil {
		return nil, err
	}
	if c.etcdPeer, err = freePort(); err != nil {
		return nil, err
	}
	for i := range c.nodes {
		n := &patroniNode{name: fmt.Sprintf("node-%d", i), dir: filepath.Join(root, fmt.Sprintf("node-%d", i)),
			sock: filepath.Join(root, fmt.Sprintf("node-%d-sock", i)), conf: filepath.Join(root, fmt.Sprintf("node-%d.yml", i)),
			log: filepath.Join(root, fmt.Sprintf("node-%d.log", i))}
		if n.port, err = freePort(); err != nil {
			return nil, err
		}
		if n.api, err = freePort(); err != nil {
			return nil, err
		}
		if n.proxy, err = tcpproxy.Listen(fmt.Sprintf("127.0.0.1:%d", n.port)); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(n.sock, 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(n.conf, []byte(c.patroniYAML(n)), 0o600); err != nil {
			return nil, err
		}
		c.nodes[i] = n
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("failover: running as root needs a postgres user (Debian's postgresql package creates it): %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := chownPostgres(root); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// patroniYAML is a node's configuration. The bootstrap.dcs part is
// written to etcd by the first node and is the cluster's: ttl, loop_wait
// and retry_timeout (the failover timing), synchronous_mode (sync: a
// commit waits for one standby, and Patroni promotes only that standby),
// primary_start_timeout 0 (a crashed primary postmaster is failed over at
// once instead of restarted in place, which with the default 300 s left
// the cluster without a primary while Patroni tried) and the servers'
// settings. wal_sender_timeout 5 s: a frozen synchronous standby is
// dropped (and another made synchronous) after 5 s instead of 60.
// pg_rewind (needs wal_log_hints, which Patroni turns on) rejoins a
// killed primary; if it cannot, the data directory is removed and copied
// afresh.
func (c *patroniCluster) patroniYAML(n *patroniNode) string {
	return fmt.Sprintf(`scope: opjournal-failover
name: %[1]s
log:
  level: INFO
restapi:
  listen: 127.0.0.1:%[2]d
  connect_address: 127.0.0.1:%[2]d
etcd:
  host: 127.0.0.1:%[3]d
bootstrap:
  dcs:
    ttl: %[4]d
    loop_wait: %[5]d
    retry_timeout: %[6]d
    maximum_lag_on_failover: 16777216
    synchronous_mode: %[7]t
    primary_start_timeout: 0
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_level: replica
        hot_standby: "on"
        max_wal_senders: 10
        max_replication_slots: 10
        wal_keep_size: 256MB
        wal_receiver_status_interval: 1s
        wal_sender_timeout: 5s
        wal_receiver_timeout: 5s
        wal_retrieve_retry_interval: 200ms
        max_connections: 100
  initdb:
    - encoding: UTF8
    - auth: trust
postgresql:
  listen: 127.0.0.1:%[8]d
  connect_address: %[9]s
  data_dir: %[10]s
  bin_dir: %[11]s
  pgpass: %[10]s.pgpass
  use_pg_rewind: true
  remove_data_directory_on_rewind_failure: true
  remove_data_directory_on_diverged_timelines: true
  authentication:
    superuser:
      username: postgres
    replication:
      username: postgres
    rewind:
      username: postgres
  parameters:
    unix_socket_directories: %[12]s
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
`, n.name, n.api, c.etcdPort, c.set.TTL, c.set.LoopWait, c.set.RetryTimeout, c.sync, n.port, n.proxy.Addr(), n.dir, c.bin, n.sock)
}

// command makes a daemon's command: as the postgres user when we are
// root (PostgreSQL refuses to run as root), in its own process group.
func (c *patroniCluster) command(log string, name string, args ...string) (*exec.Cmd, chan struct{}, error) {
	f, err := os.OpenFile(log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), "HOME="+c.root)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.cred}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("start %s: %w", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	return cmd, done, nil
}

// start starts etcd and the three nodes and waits until the cluster is
// healthy (healthy says what that means).
func (c *patroniCluster) start(ctx context.Context) error {
	// --enable-v2: Patroni's etcd: backend speaks etcd's v2 API. Its etcd3:
	// backend (Patroni 3.0.2, Debian 12) lost acknowledged writes in sync
	// mode when the primary was frozen past the ttl and resumed: it wrote
	// the leader key back without checking that it still held it (fixed
	// upstream after 3.0.2, Patroni PR #2689). The v2 backend updates the
	// key with prevValue, which fails, and Patroni demotes.
	var err error
	c.etcd, c.etcdDone, err = c.command(c.etcdLog, "etcd", "--name", "opjournal-failover", "--data-dir", c.etcdDir,
		"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", c.etcdPort), "--advertise-client-urls", fmt.Sprintf("http://127.0.0.1:%d", c.etcdPort),
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", c.etcdPeer), "--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", c.etcdPeer),
		"--initial-cluster", fmt.Sprintf("opjournal-failover=http://127.0.0.1:%d", c.etcdPeer), "--enable-v2=true")
	if err != nil {
		return err
	}
	if err := waitFor(ctx, startTimeout, "etcd answering", func() (bool, error) {
		resp, err := c.client.Get(fmt.Sprintf("http://127.0.0.1:%d/v2/keys/", c.etcdPort))
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		return err
	}
	for _, n := range c.nodes {
		if err := c.startNode(n); err != nil {
			return err
		}
	}
	return c.waitHealthy(ctx, standbyTimeout)
}

// startNode starts a node's Patroni (which starts its PostgreSQL).
func (c *patroniCluster) startNode(n *patroniNode) error {
	// A killed postmaster leaves its socket's lock file behind.
	if ents, err := os.ReadDir(n.sock); err == nil {
		for _, e := range ents {
			_ = os.Remove(filepath.Join(n.sock, e.Name()))
		}
	}
	cmd, done, err := c.command(n.log, "patroni", n.conf)
	if err != nil {
		return err
	}
	n.cmd, n.done = cmd, done
	return nil
}

// members asks the first node that answers for the cluster (etcd's view
// through Patroni); skip names a node not to ask (one that is frozen).
func (c *patroniCluster) members(ctx context.Context, skip string) ([]patroniMember, error) {
	var last error = errors.New("no node answered")
	for _, n := range c.nodes {
		if n.name == skip || n.cmd == nil {
			continue
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/cluster", n.api), nil)
		resp, err := c.client.Do(req)
		if err != nil {
			last = err
			continue
		}
		var body struct {
			Members []patroniMember `json:"members"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil {
			last = err
			continue
		}
		return body.Members, nil
	}
	return nil, last
}

// leaderOf returns the leader's name and the cluster's timeline ("" when
// there is no running leader).
func leaderOf(ms []patroniMember) (string, int) {
	for _, m := range ms {
		if m.Role == "leader" && m.State == "running" {
			return m.Name, m.Timeline
		}
	}
	return "", 0
}

// roleOf returns the name of the first member in role.
func roleOf(ms []patroniMember, role string) string {
	for _, m := range ms {
		if m.Role == role {
			return m.Name
		}
	}
	return ""
}

func (c *patroniCluster) node(name string) *patroniNode {
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// waitHealthy waits until the cluster is whole again: three members
// running, one leader, both others streaming from it (in sync mode one
// of them the synchronous standby, as pg_stat_replication says) and
// nothing left to replay.
func (c *patroniCluster) waitHealthy(ctx context.Context, within time.Duration) error {
	return waitFor(ctx, within, "the Patroni cluster healthy (a leader, two streaming standbys"+map[bool]string{true: ", one of them sync", false: ""}[c.sync]+")", func() (bool, error) {
		ms, err := c.members(ctx, "")
		if err != nil {
			return false, err
		}
		leader, _ := leaderOf(ms)
		running := 0
		for _, m := range ms {
			if m.State == "running" || m.State == "streaming" {
				running++
			}
		}
		if leader == "" || running < 3 {
			return false, fmt.Errorf("members %+v", ms)
		}
		r, err := c.replication(ctx, c.node(leader))
		if err != nil {
			return false, err
		}
		if r.streaming < 2 || c.sync && r.sync < 1 || r.lagBytes > 0 {
			return false, fmt.Errorf("leader %s: %d standbys streaming, %d sync, %d bytes to replay", leader, r.streaming, r.sync, r.lagBytes)
		}
		return true, nil
	})
}

// standbys is what a primary's pg_stat_replication says.
type standbys struct {
	streaming, sync int
	lagBytes        int64
}

// connect opens a plain connection to one node.
func (c *patroniCluster) connect(ctx context.Context, n *patroniNode) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return pgx.Connect(cctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&application_name=opjournal-failoverctl&connect_timeout=2", n.port))
}

func (c *patroniCluster) replication(ctx context.Context, n *patroniNode) (standbys, error) {
	conn, err := c.connect(ctx, n)
	if err != nil {
		return standbys{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var s standbys
	err = conn.QueryRow(qctx, `SELECT count(*) FILTER (WHERE state = 'streaming'), count(*) FILTER (WHERE state = 'streaming' AND sync_state = 'sync'),
		COALESCE(max(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)), 0)::bigint FROM pg_stat_replication`).Scan(&s.streaming, &s.sync, &s.lagBytes)
	return s, err
}

// writable reports whether a node's PostgreSQL accepts writes now.
func (c *patroniCluster) writable(ctx context.Context, n *patroniNode) bool {
	conn, err := c.connect(ctx, n)
	if err != nil {
		return false
	}
	defer conn.Close(context.WithoutCancel(ctx))
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var recovery bool
	return conn.QueryRow(qctx, "SELECT pg_is_in_recovery()").Scan(&recovery) == nil && !recovery
}

// waitReplayed waits until every standby has replayed what the leader has
// written so far.
func (c *patroniCluster) waitReplayed(ctx context.Context, leader *patroniNode, within time.Duration) error {
	conn, err := c.connect(ctx, leader)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var lsn string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		return err
	}
	return waitFor(ctx, within, "the standbys replayed "+lsn, func() (bool, error) {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE replay_lsn >= $1::pg_lsn`, lsn).Scan(&n)
		return n >= 2, err
	})
}

// switchover asks the leader's Patroni to hand over (to a candidate of
// its choosing: in sync mode the synchronous standby).
func (c *patroniCluster) switchover(ctx context.Context, leader *patroniNode) error {
	body, _ := json.Marshal(map[string]string{"leader": leader.name})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/switchover", leader.api), bytes.NewReader(body))
	cl := &http.Client{Timeout: 60 * time.Second}
	resp, err := cl.Do(req)
	if err != nil {
		return fmt.Errorf("switchover: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("switchover: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	return nil
}

// postgresPIDs are a node's postmaster and every process it started.
func postgresPIDs(n *patroniNode) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(n.dir, "postmaster.pid"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", n.name, err)
	}
	pm, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		return nil, fmt.Errorf("%s: postmaster.pid: %w", n.name, err)
	}
	return append([]int{pm}, childrenOf(pm)...), nil
}

// signalAll sends sig to every pid at once and, for SIGKILL, waits until
// none is alive.
func signalAll(pids []int, sig syscall.Signal) error {
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
	if sig != syscall.SIGKILL {
		return nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("process %d still alive after SIGKILL", pid)
			}
			time.Sleep(5 * time.Millisecond) // a dying process cannot be awaited: it is not our child
		}
	}
	return nil
}

// killNode crashes a whole node: its Patroni and its PostgreSQL at once.
func (c *patroniCluster) killNode(n *patroniNode) error {
	pids, err := postgresPIDs(n)
	if err != nil {
		return err
	}
	if n.cmd != nil {
		pids = append([]int{n.cmd.Process.Pid}, pids...)
	}
	if err := signalAll(pids, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s: %w", n.name, err)
	}
	if n.cmd != nil {
		<-n.done
	}
	n.cmd = nil
	return nil
}

// stop ends everything: the nodes' Patroni and PostgreSQL, etcd, the
// proxies. Nothing is kept, so SIGKILL.
func (c *patroniCluster) stop() {
	for _, n := range c.nodes {
		if n == nil {
			continue
		}
		if pids, err := postgresPIDs(n); err == nil {
			_ = signalAll(pids, syscall.SIGCONT)
			_ = signalAll(pids, syscall.SIGKILL)
		}
		if n.cmd != nil {
			_ = n.cmd.Process.Kill()
			<-n.done
		}
		n.proxy.Close()
	}
	if c.etcd != nil {
		_ = c.etcd.Process.Signal(syscall.SIGCONT)
		_ = c.etcd.Process.Kill()
		<-c.etcdDone
	}
}

// patroniVersion is `patroni --version`'s answer ("patroni 3.0.2"), for
// the report: the guarantee was measured with one version.
func patroniVersion() string {
	out, err := exec.Command("patroni", "--version").Output()
	if err != nil {
		return "(version unknown)"
	}
	return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "patroni"))
}
