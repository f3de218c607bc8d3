package soak

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"

	"github.com/opjournal/opjournal/internal/testkit/procs"
)

// Timeouts of the child processes. None is a synchronisation delay: each
// bounds a wait for an event.
const (
	startTimeout = 60 * time.Second // until the ready line
	stopTimeout  = 15 * time.Second // SIGTERM until exit
)

// replica is one journal process. Its addresses survive restarts when the
// ports are free again (they normally are right after a kill); otherwise
// it comes back on new ports and the resolvers and reconcilers follow.
type replica struct {
	idx      int
	proc     *procs.Proc
	grpcAddr string
	httpAddr string
	up       bool
}

// reconcilerProc is one reconciler process, attached to a replica.
type reconcilerProc struct {
	idx      int
	proc     *procs.Proc
	replica  int    // the replica it talks to
	addr     string // the address it was started with
	restarts int
}

// cluster runs the child processes and knows which journal addresses are
// live.
type cluster struct {
	cfg         Config
	dbURL       string // with search_path; application_name is added per replica
	appPrefix   string // application_name prefix of the journal's connections
	policyPath  string
	providerURL string
	hashKeys    string // OPJOURNAL_HASH_KEYS=… shared by the replicas
	logs        []io.Closer

	provider *procs.Proc

	mu          sync.Mutex
	replicas    []*replica
	reconcilers []*reconcilerProc
	resolvers   map[*liveResolver]struct{}

	journalKills, reconcilerKills, movedPorts atomic.Int64
}

func (c *cluster) bin(name string) string { return filepath.Join(c.cfg.BinDir, name) }

// logTo returns the writer for a child's log (nil without LogDir).
func (c *cluster) logTo(name string) io.Writer {
	if c.cfg.LogDir == "" {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(c.cfg.LogDir, name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	c.logs = append(c.logs, f)
	c.mu.Unlock()
	return &lockedWriter{w: f}
}

// lockedWriter serialises writes (procs writes from one goroutine per
// process, but a restarted process shares the file with its predecessor).
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (c *cluster) startProvider(ctx context.Context) error {
	p, err := procs.Start(ctx, procs.Spec{
		Name: "provider", Path: c.bin("opjournal-fakeprovider"), Ready: "serving", Log: c.logTo("provider"),
		Args: []string{"--addr", "127.0.0.1:0", "--index-lag", c.cfg.IndexLag.String(), "--seed", fmt.Sprint(c.cfg.Seed)},
	}, startTimeout)
	if err != nil {
		return err
	}
	c.provider = p
	c.providerURL = "http://" + p.Field("addr")
	return nil
}

// journalURL is replica i's database URL: the schema, and an
// application_name the pool drop can find.
func (c *cluster) journalURL(i int) string {
	u, _ := url.Parse(c.dbURL) // parsed before
	q := u.Query()
	q.Set("application_name", fmt.Sprintf("%s-journal-%d", c.appPrefix, i+1))
	u.RawQuery = q.Encode()
	return u.String()
}

// startJournal starts replica i on grpcAddr/httpAddr (127.0.0.1:0 for any).
func (c *cluster) startJournal(ctx context.Context, i int, grpcAddr, httpAddr string) (*procs.Proc, error) {
	return procs.Start(ctx, procs.Spec{
		Name: fmt.Sprintf("journal-%d", i+1), Path: c.bin("opjournal"), Ready: "serving", Log: c.logTo(fmt.Sprintf("journal-%d", i+1)),
		Env: []string{c.hashKeys}, // the replicas share their request-hash key
		Args: []string{"serve", "--database-url", c.journalURL(i), "--grpc-addr", grpcAddr, "--http-addr", httpAddr,
			"--policy", c.policyPath, "--log-format", "json"},
	}, startTimeout)
}

func (c *cluster) startReplicas(ctx context.Context) error {
	for i := range c.cfg.Replicas {
		p, err := c.startJournal(ctx, i, "127.0.0.1:0", "127.0.0.1:0")
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.replicas = append(c.replicas, &replica{idx: i, proc: p, grpcAddr: p.Field("grpc_addr"), httpAddr: p.Field("http_addr"), up: true})
		c.mu.Unlock()
	}
	return nil
}

// startReconciler starts (or restarts) reconciler r against its replica's
// current address, or any live replica's.
func (c *cluster) startReconciler(ctx context.Context, r *reconcilerProc) error {
	c.mu.Lock()
	addr := c.liveAddrLocked(r.replica)
	c.mu.Unlock()
	if addr == "" {
		return fmt.Errorf("reconciler-%d: no live journal replica", r.idx+1)
	}
	name := fmt.Sprintf("reconciler-%d", r.idx+1)
	p, err := procs.Start(ctx, procs.Spec{
		Name: name, Path: c.bin("opjournal-reconciler"), Ready: "reconciling", Log: c.logTo(name),
		Env: []string{"PROVIDER_URL=" + c.providerURL},
		Args: []string{"--journal-addr", addr, "--policy", c.policyPath, "--id", "soak-" + name,
			"--poll-interval", c.cfg.ReconcilerPoll.String(), "--concurrency", "8"},
	}, startTimeout)
	if err != nil {
		return err
	}
	c.mu.Lock()
	r.proc, r.addr = p, addr
	c.mu.Unlock()
	return nil
}

func (c *cluster) startReconcilers(ctx context.Context) error {
	for i := range c.cfg.Reconcilers {
		r := &reconcilerProc{idx: i, replica: i % c.cfg.Replicas}
		if err := c.startReconciler(ctx, r); err != nil {
			return err
		}
		c.mu.Lock()
		c.reconcilers = append(c.reconcilers, r)
		c.mu.Unlock()
	}
	return nil
}

// liveAddrLocked is the gRPC address of replica pref if it is up, else of
// any live replica, else "". The caller holds c.mu.
func (c *cluster) liveAddrLocked(pref int) string {
	if pref >= 0 && pref < len(c.replicas) && c.replicas[pref].up {
		return c.replicas[pref].grpcAddr
	}
	for _, r := range c.replicas {
		if r.up {
			return r.grpcAddr
		}
	}
	return ""
}

// killJournal kills replica i with SIGKILL, waits `down`, and restarts it,
// on the same ports if they are free (moved is false). Agents follow
// through their resolvers; reconcilers talking to a replica that moved
// are restarted against its new address.
func (c *cluster) killJournal(ctx context.Context, i int, down time.Duration) (moved bool, err error) {
	c.mu.Lock()
	r := c.replicas[i]
	r.up = false
	p, oldAddr := r.proc, r.grpcAddr
	c.mu.Unlock()
	c.pushResolvers()
	p.Kill()
	c.journalKills.Add(1)
	sleep(ctx, down)

	np, err := c.startJournal(context.WithoutCancel(ctx), i, r.grpcAddr, r.httpAddr)
	if err != nil {
		// The port was taken in between: any free port will do.
		np, err = c.startJournal(context.WithoutCancel(ctx), i, "127.0.0.1:0", "127.0.0.1:0")
		if err != nil {
			return false, fmt.Errorf("restart journal-%d: %w", i+1, err)
		}
		moved = true
		c.movedPorts.Add(1)
	}
	c.mu.Lock()
	r.proc, r.grpcAddr, r.httpAddr, r.up = np, np.Field("grpc_addr"), np.Field("http_addr"), true
	var follow []*reconcilerProc
	for _, rc := range c.reconcilers {
		if moved && rc.addr == oldAddr {
			follow = append(follow, rc)
		}
	}
	c.mu.Unlock()
	c.pushResolvers()
	for _, rc := range follow {
		_ = rc.proc.Stop(stopTimeout)
		if err := c.startReconciler(context.WithoutCancel(ctx), rc); err != nil {
			return true, err
		}
	}
	return moved, nil
}

// killReconciler kills reconciler i with SIGKILL, waits `down`, and
// restarts it.
func (c *cluster) killReconciler(ctx context.Context, i int, down time.Duration) error {
	c.mu.Lock()
	r := c.reconcilers[i]
	p := r.proc
	c.mu.Unlock()
	p.Kill()
	c.reconcilerKills.Add(1)
	sleep(ctx, down)
	r.restarts++
	return c.startReconciler(context.WithoutCancel(ctx), r)
}

// stop stops every child process (SIGTERM, then SIGKILL).
func (c *cluster) stop() {
	c.mu.Lock()
	var all []*procs.Proc
	for _, r := range c.reconcilers {
		all = append(all, r.proc)
	}
	for _, r := range c.replicas {
		all = append(all, r.proc)
	}
	if c.provider != nil {
		all = append(all, c.provider)
	}
	logs := c.logs
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range all {
		if p == nil {
			continue
		}
		wg.Go(func() { _ = p.Stop(stopTimeout) })
	}
	wg.Wait()
	for _, l := range logs {
		_ = l.Close()
	}
}

// outputs returns the tail of every child's log, for a failure report.
func (c *cluster) outputs(tail int) string {
	c.mu.Lock()
	var all []*procs.Proc
	for _, r := range c.replicas {
		all = append(all, r.proc)
	}
	for _, r := range c.reconcilers {
		all = append(all, r.proc)
	}
	if c.provider != nil {
		all = append(all, c.provider)
	}
	c.mu.Unlock()
	var b strings.Builder
	for _, p := range all {
		if p == nil {
			continue
		}
		out := p.Output()
		if len(out) > tail {
			out = "…" + out[len(out)-tail:]
		}
		fmt.Fprintf(&b, "--- %s (pid %d)\n%s\n", p.Name, p.Pid(), out)
	}
	return b.String()
}

// --- agents' connections ---

// dial connects an agent to the journal through a resolver that always
// names a live replica, preferring replica pref: when a replica is killed
// the agent's next call goes to the other one, and comes back once it is
// restarted (on whatever port).
func (c *cluster) dial(pref int) (*grpc.ClientConn, error) {
	b := &liveResolverBuilder{c: c, pref: pref}
	return grpc.NewClient("soak-journal:///replica",
		grpc.WithResolvers(b),
		// The replicas are loopback journals without authentication, which
		// answer loopback names only (a guard against DNS rebinding):
		// the resolver's target name is not one.
		grpc.WithAuthority("localhost"),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// Reconnect quickly after a restart: the default backoff grows to
		// two minutes.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 2 * time.Second,
		}))
}

// liveResolverBuilder builds one liveResolver for one connection.
type liveResolverBuilder struct {
	c    *cluster
	pref int
}

func (b *liveResolverBuilder) Scheme() string { return "soak-journal" }

func (b *liveResolverBuilder) Build(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	r := &liveResolver{c: b.c, pref: b.pref, cc: cc}
	b.c.mu.Lock()
	if b.c.resolvers == nil {
		b.c.resolvers = map[*liveResolver]struct{}{}
	}
	b.c.resolvers[r] = struct{}{}
	b.c.mu.Unlock()
	r.push()
	return r, nil
}

// liveResolver tells its connection the address of a live replica.
type liveResolver struct {
	c      *cluster
	pref   int
	cc     resolver.ClientConn
	mu     sync.Mutex // serialises pushes
	closed atomic.Bool
}

// push sends the current live address (none while every replica is down:
// calls then fail fast as unavailable, and the agent retries later).
func (r *liveResolver) push() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed.Load() {
		return
	}
	r.c.mu.Lock()
	addr := r.c.liveAddrLocked(r.pref)
	r.c.mu.Unlock()
	var st resolver.State
	if addr != "" {
		st.Addresses = []resolver.Address{{Addr: addr}}
	}
	_ = r.cc.UpdateState(st)
}

// ResolveNow is gRPC's hint that the address failed; push from another
// goroutine, as gRPC may call this while holding its own locks.
func (r *liveResolver) ResolveNow(resolver.ResolveNowOptions) { go r.push() }

// Close forgets the resolver.
func (r *liveResolver) Close() {
	r.closed.Store(true)
	r.c.mu.Lock()
	delete(r.c.resolvers, r)
	r.c.mu.Unlock()
}

// pushResolvers tells every connection the current live addresses.
func (c *cluster) pushResolvers() {
	c.mu.Lock()
	all := make([]*liveResolver, 0, len(c.resolvers))
	for r := range c.resolvers {
		all = append(all, r)
	}
	c.mu.Unlock()
	for _, r := range all {
		r.push()
	}
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
