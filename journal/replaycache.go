package journal

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/protocol"
)

// The replay cache answers a Register of a terminal operation from memory:
// the same key, request hash, refs and parent as a succeeded or
// failed_final operation this process has seen is a replay (the protocol
// table's "Register: replay" rule, evaluated on the entry), which the
// store would read again at the cost of a round trip and a transaction.
// A Register of a terminal operation answers its final record
// (finalRecord): the status, result, external_id and error code, which
// never change again, without the bookkeeping a terminal row still
// changes (the duplicate reports of MarkSucceeded, Acknowledge's end of a
// review, SetNote's note, their updated_at). So an entry gives the answer
// the store would give, on any replica and whatever another replica has
// done to the row since, as long as the row exists. Commands through this
// process that change a terminal row also refresh or drop its entry
// (afterChange), which keeps the entry's record current for no cost.
//
// An entry must never outlive its row: a purge through this process drops
// the entries of the action it purged (purged), and no entry lives past
// its row's updated_at + the action's retention − the age bound, so a
// purge by another replica (or by `opjournal purge`) finds no entry left.
//
// Fills race the commands that change a row: a Register that read the row
// before a change must not put the older record back after the change
// dropped the entry. Every change of a terminal row bumps its key's
// stripe (and a purge the purge count) after the store committed it, and
// a fill takes a ticket (the counts) before its store call and is put
// only if neither moved meanwhile: a moved count costs one fill, never a
// stale answer.

// DefaultReplayCacheSize is the number of terminal operations a Service
// keeps for replays unless WithReplayCache says otherwise. An entry holds
// at most maxReplayEntryBytes of payload and result (larger operations
// are not kept: their store read is not what their replay costs), so
// about 4 KiB each at worst with its key and fields: under 20 MiB in all,
// within the 64 MiB soft memory limit `opjournal serve` runs with.
const DefaultReplayCacheSize = 4096

// maxReplayEntryBytes bounds the payload and result of an operation the
// replay cache keeps.
const maxReplayEntryBytes = 3 << 10

// ReplayCacheMaxAge bounds how long a replay cache entry lives after it
// was filled, and how close to the end of its row's retention it may be
// kept. It is also the clock skew between a replica and its database that
// the retention bound tolerates.
const ReplayCacheMaxAge = time.Minute

// replayStripes is the number of change counters; keys share one when
// their hashes collide, which costs a fill, never correctness.
const replayStripes = 1024

// replayKey is an entry's key: the operation's tenant and key. The
// request hash, refs and parent are compared with the entry's record.
type replayKey struct{ tenant, key string }

// replayEntry is a terminal operation as the store returned it. A hit
// still validates the request against the payload_schema (once per
// request: schemacache.go), as the operation may have been registered by
// another replica.
type replayEntry struct {
	op      *opjournal.Operation
	expires time.Time
}

// replayTicket is what a fill compares, taken before its store call.
type replayTicket struct {
	stripe         int
	changes, purge uint64
}

// replayCache is a bounded LRU of terminal operations; nil is a disabled
// cache, whose methods do nothing.
type replayCache struct {
	mu        sync.Mutex
	lru       *simplelru.LRU[replayKey, *replayEntry]
	size      int
	seed      maphash.Seed
	changes   [replayStripes]atomic.Uint64
	purges    atomic.Uint64
	maxAge    time.Duration
	now       func() time.Time
	retention func(action string) (time.Duration, bool)
	replay    *protocol.Rule

	hits, misses atomic.Uint64
}

// ReplayCacheConfig sizes the replay cache (see WithReplayCache).
type ReplayCacheConfig struct {
	// Size is the number of operations kept; 0 disables the cache.
	Size int
	// MaxAge bounds an entry's age (0: ReplayCacheMaxAge).
	MaxAge time.Duration
	// Now is the process clock the age is measured on (nil: time.Now);
	// tests move it by hand.
	Now func() time.Time
}

// WithReplayCache sizes the cache of terminal operations that answers
// replays without a store read (DefaultReplayCacheSize when not given;
// Size 0 turns it off).
func WithReplayCache(c ReplayCacheConfig) Option {
	return func(s *Service) { s.replayConfig = c }
}

// ReplayCacheStats counts the replay cache's look-ups.
type ReplayCacheStats struct {
	// Size is the cache's bound (0: disabled); Len the entries it holds.
	Size, Len int
	// Hits were answered from the cache; Misses went to the store.
	Hits, Misses uint64
}

// ReplayCacheStats reports the replay cache's size and counts.
func (s *Service) ReplayCacheStats() ReplayCacheStats {
	c := s.replays
	if c == nil {
		return ReplayCacheStats{}
	}
	c.mu.Lock()
	size, n := c.size, c.lru.Len()
	c.mu.Unlock()
	return ReplayCacheStats{Size: size, Len: n, Hits: c.hits.Load(), Misses: c.misses.Load()}
}

func newReplayCache(cfg ReplayCacheConfig, retention func(string) (time.Duration, bool)) *replayCache {
	if cfg.Size <= 0 {
		return nil
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = ReplayCacheMaxAge
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	l, err := simplelru.NewLRU[replayKey, *replayEntry](cfg.Size, nil)
	if err != nil {
		panic(err) // only for a size ≤ 0, excluded above
	}
	c := &replayCache{lru: l, size: cfg.Size, seed: maphash.MakeSeed(), maxAge: cfg.MaxAge, now: cfg.Now, retention: retention}
	for _, r := range protocol.Rules(protocol.CmdRegister) {
		if r.Case == "replay" {
			c.replay = r
		}
	}
	if c.replay == nil {
		panic("journal: the protocol table has no Register replay rule")
	}
	return c
}

// cacheable reports whether op may be kept: only the terminal statuses,
// named here rather than through Status.Terminal, so that a status added
// later (one awaiting a person's approval) is never cached by accident.
func cacheable(op *opjournal.Operation) bool {
	return op != nil && (op.Status == opjournal.StatusSucceeded || op.Status == opjournal.StatusFailedFinal)
}

// small reports whether op is small enough to keep (maxReplayEntryBytes).
func small(op *opjournal.Operation) bool {
	return len(op.Payload)+len(op.Result) <= maxReplayEntryBytes
}

func (c *replayCache) stripe(tenant, key string) int {
	return int(maphash.Comparable(c.seed, replayKey{tenant, key}) % replayStripes)
}

// ticket returns the counts a later fill of (tenant, key) compares.
func (c *replayCache) ticket(tenant, key string) replayTicket {
	if c == nil {
		return replayTicket{}
	}
	i := c.stripe(tenant, key)
	return replayTicket{stripe: i, changes: c.changes[i].Load(), purge: c.purges.Load()}
}

// lookup returns the operation that answers cmd, a Register of (tenant,
// cmd.Key) with its request hash, refs and parent set, if the cache holds
// it and the replay rule holds for it; otherwise nil, and the caller asks
// the store (which gives any refusal, as it would without the cache).
func (c *replayCache) lookup(tenant string, cmd *protocol.Command) *replayEntry {
	if c == nil {
		return nil
	}
	k := replayKey{tenant, cmd.Key}
	now := c.now()
	c.mu.Lock()
	e, ok := c.lru.Get(k)
	if ok && !now.Before(e.expires) {
		c.lru.Remove(k)
		ok = false
	}
	c.mu.Unlock()
	// The rule reads only the request's fields and the record's, which
	// nobody modifies; so it runs outside the lock.
	if !ok || e.op.Action != cmd.Action || !c.replay.Holds(e.op, cmd, now) {
		c.misses.Add(1)
		return nil
	}
	c.hits.Add(1)
	return e
}

// expiry is when an entry of op filled now must go: after the age bound,
// and before its row's retention can end (by the database's clock, which
// may be ahead of ours by up to the age bound). ok is false when that is
// already past, or the action has no retention the cache knows.
func (c *replayCache) expiry(op *opjournal.Operation, now time.Time) (time.Time, bool) {
	ret, ok := c.retention(op.Action)
	if !ok {
		return time.Time{}, false
	}
	exp := now.Add(c.maxAge)
	if last := op.UpdatedAt.Add(ret - c.maxAge); last.Before(exp) {
		exp = last
	}
	return exp, now.Before(exp)
}

// fill keeps op, which a store call made after t was taken returned, if
// it is terminal and nothing changed the key's row or purged anything
// through this process since t.
func (c *replayCache) fill(t replayTicket, op *opjournal.Operation) {
	if c == nil || !cacheable(op) || !small(op) {
		return
	}
	now := c.now()
	exp, ok := c.expiry(op, now)
	if !ok {
		return
	}
	e := &replayEntry{op: op, expires: exp}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.changes[t.stripe].Load() != t.changes || c.purges.Load() != t.purge {
		return
	}
	c.lru.Add(replayKey{op.Tenant, op.Key}, e)
}

// afterChange follows a command other than Register that returned op, the
// row as the command left it: when op is terminal, the command may have
// changed a terminal row's bookkeeping (or made it terminal), so the
// key's stripe is bumped, any entry dropped, and op kept instead if
// nothing else changed the row through this process since t (op is then
// the newest record this process knows). A non-terminal op needs nothing:
// such a row was not terminal before either, so no entry of it exists.
func (c *replayCache) afterChange(t replayTicket, tenant string, op *opjournal.Operation) {
	if c == nil || !cacheable(op) {
		return
	}
	now := c.now()
	exp, keep := c.expiry(op, now)
	keep = keep && small(op)
	k := replayKey{tenant, op.Key}
	c.mu.Lock()
	defer c.mu.Unlock()
	before := c.changes[t.stripe].Add(1) - 1
	if keep && before == t.changes && c.purges.Load() == t.purge {
		c.lru.Add(k, &replayEntry{op: op, expires: exp})
		return
	}
	c.lru.Remove(k)
}

// purged follows a purge statement that deleted operations of action
// whose updated_at was at most newest: it drops every entry of the action
// that may be one of them, and makes fills that were under way when it
// ran keep nothing. updated_at is the database's time at the start of
// the writing transaction, so a later version of a row can carry a
// slightly earlier time than the version an entry holds; the margin
// covers that.
func (c *replayCache) purged(action string, newest time.Time) {
	if c == nil {
		return
	}
	const margin = time.Minute
	limit := newest.Add(margin)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.purges.Add(1)
	for _, k := range c.lru.Keys() {
		if e, ok := c.lru.Peek(k); ok && e.op.Action == action && e.op.UpdatedAt.Before(limit) {
			c.lru.Remove(k)
		}
	}
}

// replayed answers req, whose command c has its request hash, refs and
// parent set and whose payload passed its checks, from the replay cache:
// ok is false on a miss, and Register goes on to the store. A hit answers
// as the store's replay would (the final record, and with a claim a lost
// claim without retry-after, since a terminal operation has no lease).
func (s *Service) replayed(req RegisterRequest, c *protocol.Command) (res RegisterResult, ok bool) {
	e := s.replays.lookup(req.Tenant, c)
	if e == nil {
		return RegisterResult{}, false
	}
	// A copy of the record (finalRecord), so that a caller that sets a
	// field of its answer cannot change the entry; the maps and slices are
	// shared and read only, as the store's own answers are.
	op := finalRecord(e.op)
	res = RegisterResult{Operation: op}
	if c.Claim {
		res.Claim = &ClaimResult{Operation: op}
	}
	return res, true
}

// finalRecord is op as a Register answers it when op is terminal: the
// record that never changes again (status, result, external_id, error
// code, attempts, payload, refs, times of the attempts), without the
// bookkeeping a terminal row still changes — the review (needs_review,
// review_reason), the duplicate reports, the note and updated_at. A
// replay's answer is the same from the store and from the replay cache of
// any replica, however old the entry: the decision it carries (replay,
// or failed_final) is final, and the review state is Lookup's to show.
// A non-terminal op is returned as it is.
func finalRecord(op *opjournal.Operation) *opjournal.Operation {
	if !cacheable(op) {
		return op
	}
	c := *op
	c.NeedsReview, c.ReviewReason = false, ""
	c.DuplicateExternalID, c.DuplicateExternalIDs, c.DuplicateReports = "", nil, 0
	c.Note, c.UpdatedAt = "", time.Time{}
	return &c
}
