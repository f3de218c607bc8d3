package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// Defaults of Config.
const (
	DefaultQueueSize   = 1000
	DefaultWorkers     = 4
	DefaultTimeout     = 15 * time.Second
	DefaultAttempts    = 8
	DefaultBaseDelay   = 5 * time.Second
	DefaultMaxDelay    = 20 * time.Minute
	DefaultRescanEvery = 5 * time.Minute
	// backoffFactor multiplies the delay after each failed attempt: with
	// the defaults the retries come after about 5 s, 15 s, 45 s, 2¼ min,
	// 6¾ min, 20 min and 20 min (each ±25 %), the last attempt some 50
	// minutes after the first.
	backoffFactor = 3
	// maxSettled bounds the memory of messages already settled in this
	// process (see Sender.settled).
	maxSettled = 100_000
	// maxResponseBytes is how much of a receiver's answer is read (and
	// thrown away) so that the connection can be reused.
	maxResponseBytes = 64 << 10
)

// Config configures a Sender. Zero values take the defaults.
type Config struct {
	// Secrets sign every delivery (each one: several during a rotation).
	// At least one is required.
	Secrets []Secret
	// PublicURL is the server's external URL (serve --public-url); when
	// set, each body links to the operation in the console.
	PublicURL string
	// QueueSize bounds the deliveries held in memory, queued or waiting
	// for their next attempt (default 1000). A notification beyond it is
	// dropped (counted and logged), never waited for: Register must not
	// slow down because a receiver is down. The rescan sends it later.
	QueueSize int
	// Workers is how many deliveries are made at once (default 4).
	Workers int
	// Timeout bounds one attempt, connection to answer (default 15 s, the
	// specification's recommendation of 15 to 30 s).
	Timeout time.Duration
	// Attempts bounds the attempts of one delivery (default 8).
	Attempts int
	// BaseDelay is the delay before the first retry; each later one is
	// three times the previous, at most MaxDelay (defaults 5 s and 20
	// min), each with ±25 % of random jitter.
	BaseDelay, MaxDelay time.Duration
	// Pending lists the operations awaiting approval whose action has a
	// notify URL; Run sends them when it starts and every RescanEvery
	// (default 5 min), so that what a restart, a full queue or another
	// replica's end lost is still delivered. nil: no rescan.
	Pending Source
	// RescanEvery is the period of the rescan.
	RescanEvery time.Duration
	// Client makes the requests; nil makes one that follows no redirect
	// and uses the proxy of $HTTPS_PROXY/$HTTP_PROXY (see the package
	// doc on SSRF).
	Client *http.Client
	// Logger receives one line per outcome (never the secret, the URL's
	// path or query, or the receiver's answer).
	Logger *slog.Logger
	// Now is the clock of webhook-timestamp (default time.Now).
	Now func() time.Time
	// Jitter returns a number in [0, 1) that spreads each retry delay
	// (default math/rand).
	Jitter func() float64
}

// Source calls yield with every notification still due; it stops early
// when yield returns false.
type Source func(ctx context.Context, yield func(Notification) bool) error

// Outcome is what became of one attempt or delivery, as the metrics count
// it.
type Outcome string

// The outcomes of opjournal_webhook_deliveries_total.
const (
	// OutcomeDelivered: the receiver answered 2xx.
	OutcomeDelivered Outcome = "delivered"
	// OutcomeRetried: an attempt failed and another one is scheduled.
	OutcomeRetried Outcome = "retried"
	// OutcomeFailed: the receiver answered 410 Gone, or the last attempt failed.
	OutcomeFailed Outcome = "failed"
	// OutcomeDropped: the queue was full; the next rescan tries again.
	OutcomeDropped Outcome = "dropped"
)

// Sender delivers notifications: a bounded in-memory queue, a few
// workers, retries with exponential backoff and jitter. It only sends:
// it never writes to the journal, so no delivery outcome can change an
// operation. It is safe for concurrent use.
type Sender struct {
	cfg    Config
	log    *slog.Logger
	queue  chan *delivery
	timers sync.WaitGroup
	mu     sync.Mutex
	// held are the message ids in memory (queued or waiting for a retry):
	// a second Notify of one (a rescan) is not queued twice.
	held map[string]bool
	// settled are the message ids this process delivered or gave up on: a
	// rescan does not send them again. It is cleared when it reaches
	// maxSettled, which only costs a re-send that receivers deduplicate.
	settled map[string]bool
	counts  map[Outcome]uint64
}

// delivery is one notification on its way, with its attempts so far.
type delivery struct {
	n        Notification
	id       string
	body     []byte
	attempts int
}

// New returns a Sender; Run starts it. It returns an error without a
// secret or with a negative setting.
func New(cfg Config) (*Sender, error) {
	if len(cfg.Secrets) == 0 {
		return nil, errors.New("webhook: at least one signing secret is required")
	}
	if cfg.QueueSize < 0 || cfg.Workers < 0 || cfg.Timeout < 0 || cfg.Attempts < 0 || cfg.BaseDelay < 0 || cfg.MaxDelay < 0 || cfg.RescanEvery < 0 {
		return nil, errors.New("webhook: negative queue size, workers, timeout, attempts, delay or rescan period")
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.QueueSize, DefaultQueueSize)
	def(&cfg.Workers, DefaultWorkers)
	def(&cfg.Attempts, DefaultAttempts)
	defDur(&cfg.Timeout, DefaultTimeout)
	defDur(&cfg.BaseDelay, DefaultBaseDelay)
	defDur(&cfg.MaxDelay, DefaultMaxDelay)
	defDur(&cfg.RescanEvery, DefaultRescanEvery)
	cfg.MaxDelay = max(cfg.MaxDelay, cfg.BaseDelay)
	if cfg.Client == nil {
		cfg.Client = NewClient()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Jitter == nil {
		cfg.Jitter = rand.Float64
	}
	return &Sender{cfg: cfg, log: cfg.Logger, queue: make(chan *delivery, cfg.QueueSize),
		held: map[string]bool{}, settled: map[string]bool{}, counts: map[Outcome]uint64{}}, nil
}

// NewClient returns the HTTP client of a Sender: it follows no redirect
// (a 3xx is a failed attempt, as the specification says: the policy should
// name the final URL, and a redirect must not carry a signed request to
// another host), and it goes through $HTTPS_PROXY/$HTTP_PROXY when set,
// which is where a filtering proxy against SSRF belongs. Config.Timeout
// bounds each request.
func NewClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = DefaultWorkers
	return &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// CheckURL reports whether u may be a notify URL: an absolute http or
// https URL with a host and without credentials. Its error never repeats
// the URL, whose path or query may hold a receiver's token.
func CheckURL(u string) error {
	p, err := url.Parse(u)
	switch {
	case err != nil:
		return errors.New("is not a URL")
	case p.Scheme != "http" && p.Scheme != "https":
		return errors.New("must be an http:// or https:// URL")
	case p.Host == "" || p.Hostname() == "":
		return errors.New("must name a host")
	case p.User != nil:
		return errors.New("must not carry credentials (user:password@)")
	}
	return nil
}

// hostOf is what the log shows of a URL: its host, never its path or
// query.
func hostOf(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Host
	}
	return ""
}

// Notify queues n for delivery and returns at once. It returns false when
// n was not queued: the same question is already on its way or was
// settled by this process, the queue is full (counted as dropped and
// logged; the rescan sends it later), or n's URL is not http(s).
func (s *Sender) Notify(n Notification) bool {
	return s.enqueue(n, false)
}

// enqueue is Notify; a rescan passes again=true so that a question settled
// in this process is not sent twice by the same process.
func (s *Sender) enqueue(n Notification, again bool) bool {
	if err := CheckURL(n.URL); err != nil {
		s.log.Warn("webhook not sent: the notify URL "+err.Error(), "tenant", n.Tenant, "operation_key", n.OperationKey, "action_type", n.ActionType)
		return false
	}
	id := n.MessageID()
	s.mu.Lock()
	if s.held[id] || (again && s.settled[id]) {
		s.mu.Unlock()
		return false
	}
	if len(s.held) >= s.cfg.QueueSize {
		s.counts[OutcomeDropped]++
		s.mu.Unlock()
		s.log.Warn("webhook queue full: notification dropped (the next rescan sends it)", "tenant", n.Tenant,
			"operation_key", n.OperationKey, "action_type", n.ActionType, "queue_size", s.cfg.QueueSize)
		return false
	}
	s.held[id] = true
	delete(s.settled, id)
	s.mu.Unlock()
	// Never blocks: held counts every delivery queued or waiting, and the
	// channel has room for QueueSize of them.
	s.queue <- &delivery{n: n, id: id, body: n.Body(s.cfg.PublicURL)}
	return true
}

// Run makes deliveries until ctx ends, with Config.Workers workers, and
// rescans Config.Pending when it starts and then periodically. What is in
// memory when ctx ends is not delivered; the next start's rescan sends
// it. It returns nil when ctx ends.
func (s *Sender) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range s.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case d := <-s.queue:
					s.attempt(ctx, d)
				}
			}
		}()
	}
	if s.cfg.Pending != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(s.cfg.RescanEvery)
			defer t.Stop()
			for {
				if n, err := s.Rescan(ctx); err != nil && ctx.Err() == nil {
					s.log.Warn("webhook rescan failed; trying again at the next one", "error", err.Error())
				} else if n > 0 {
					s.log.Info("webhook rescan queued notifications of operations still awaiting approval", "queued", n)
				}
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	wg.Wait()
	s.timers.Wait()
	return nil
}

// Rescan queues every notification Config.Pending lists that this process
// has not settled and does not hold, and returns how many it queued.
func (s *Sender) Rescan(ctx context.Context) (int, error) {
	if s.cfg.Pending == nil {
		return 0, nil
	}
	queued := 0
	err := s.cfg.Pending(ctx, func(n Notification) bool {
		if s.enqueue(n, true) {
			queued++
		}
		return ctx.Err() == nil
	})
	return queued, err
}

// attempt makes one attempt of d and settles it or schedules the next.
func (s *Sender) attempt(ctx context.Context, d *delivery) {
	d.attempts++
	status, retryAfter, err := s.post(ctx, d)
	if ctx.Err() != nil {
		return // shutting down: not an outcome of the receiver's
	}
	log := s.log.With("webhook_id", d.id, "tenant", d.n.Tenant, "operation_key", d.n.OperationKey,
		"action_type", d.n.ActionType, "host", hostOf(d.n.URL), "attempt", d.attempts)
	if err == nil && status >= 200 && status < 300 {
		s.settle(d, OutcomeDelivered)
		log.Info("webhook delivered", "status", status)
		return
	}
	why := ""
	if err != nil {
		why = err.Error()
	} else {
		why = "HTTP " + strconv.Itoa(status)
	}
	if status == http.StatusGone {
		// The receiver says it wants no more of these (the specification's
		// 410): no retry.
		s.settle(d, OutcomeFailed)
		log.Warn("webhook refused with 410 Gone: not retried", "status", status)
		return
	}
	if d.attempts >= s.cfg.Attempts {
		s.settle(d, OutcomeFailed)
		log.Warn("webhook failed: no attempt left (the operation is unchanged; the console lists it)", "reason", why)
		return
	}
	delay := max(s.Backoff(d.attempts), min(retryAfter, s.cfg.MaxDelay))
	s.count(OutcomeRetried)
	log.Info("webhook attempt failed; retrying", "reason", why, "retry_in", delay.Round(time.Millisecond).String())
	s.timers.Add(1)
	go func() {
		defer s.timers.Done()
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			s.release(d)
		case <-t.C:
			s.queue <- d // room is reserved: d is still held
		}
	}()
}

// Backoff is the delay after the attempt-th failed attempt: BaseDelay ×
// 3^(attempt-1), at most MaxDelay, times a random factor in [0.75, 1.25).
func (s *Sender) Backoff(attempt int) time.Duration {
	d := s.cfg.BaseDelay
	for i := 1; i < attempt && d < s.cfg.MaxDelay; i++ {
		d *= backoffFactor
	}
	d = min(d, s.cfg.MaxDelay)
	return time.Duration(float64(d) * (0.75 + s.cfg.Jitter()/2))
}

// post makes one request: the body, signed now. It returns the status, the
// Retry-After the receiver asked for (0 for none), or the error of a
// request that got no answer (a timeout, a refused connection).
func (s *Sender) post(ctx context.Context, d *delivery) (int, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.n.URL, bytes.NewReader(d.body))
	if err != nil {
		return 0, 0, errors.New("bad request URL")
	}
	now := s.cfg.Now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "opjournal-webhook/1")
	req.Header.Set(HeaderID, d.id)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(HeaderSignature, Sign(s.cfg.Secrets, d.id, now, d.body))
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return 0, 0, requestError(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBytes))
	var retryAfter time.Duration
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
		retryAfter = time.Duration(secs) * time.Second
	}
	return resp.StatusCode, retryAfter, nil
}

// requestError says why a request got no answer without the URL that
// *url.Error repeats (its path or query may hold the receiver's token).
func requestError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return errors.New("no answer within the timeout")
		}
		return fmt.Errorf("request failed: %w", ue.Err)
	}
	return err
}

// settle ends d with outcome: it leaves memory and is remembered, so that
// a rescan of this process does not send it again.
func (s *Sender) settle(d *delivery, outcome Outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.held, d.id)
	if len(s.settled) >= maxSettled {
		clear(s.settled)
	}
	s.settled[d.id] = true
	s.counts[outcome]++
}

// release forgets d without an outcome (the sender stopped before its
// retry): the next start's rescan sends it.
func (s *Sender) release(d *delivery) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.held, d.id)
}

func (s *Sender) count(o Outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts[o]++
}

// Stats is a snapshot of a Sender's counters.
type Stats struct {
	// Deliveries counts outcomes (OutcomeRetried counts failed attempts
	// that were retried).
	Deliveries map[Outcome]uint64
	// Held is how many deliveries are in memory, queued or waiting for a
	// retry.
	Held int
}

// Stats returns the counters now.
func (s *Sender) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[Outcome]uint64, 4)
	for _, o := range []Outcome{OutcomeDelivered, OutcomeRetried, OutcomeFailed, OutcomeDropped} {
		m[o] = s.counts[o]
	}
	return Stats{Deliveries: m, Held: len(s.held)}
}
