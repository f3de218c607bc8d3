package linearize

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/opjournal/opjournal/internal/testkit/testclock"
	"github.com/opjournal/opjournal/protocol/model"
)

// Key is one operation key of a run and its action.
type Key struct {
	Key    string
	Action string
}

// Workload shapes the random commands.
type Workload int

const (
	// Mixed draws every command with similar weights.
	Mixed Workload = iota
	// DuplicateRace is mostly agents reporting other external ids for
	// terminal operations while operators acknowledge the reviews they
	// cause: the race of a guard checked on a stale read.
	DuplicateRace
)

// Config is one run.
type Config struct {
	// Clients are the journal's doors; each call picks one at random (two
	// servers on one database: two clients).
	Clients []*Client
	Model   *model.Model
	Keys    []Key
	Workers int
	// Ops is how many calls each worker makes (with Clock: in rounds of
	// PerRound calls; the clock moves between rounds, never during one).
	Ops      int
	PerRound int
	Clock    *testclock.Clock // nil: the journal's own clock (Input.Now unknown)
	Base     time.Time        // the Clock's time at Input.Now 0
	// CallTimeout bounds one call; a call that runs out is Maybe.
	CallTimeout time.Duration
	Workload    Workload
	// ExternalIDs is the size of the pool of external ids (default 4).
	ExternalIDs int
	Seed        uint64
	// Steps are the clock moves drawn between rounds (milliseconds).
	Steps []int64
}

// Result is a checked run.
type Result struct {
	Check   porcupine.CheckResult
	History []porcupine.Operation
	Info    porcupine.LinearizationInfo
	// Counts is how often each command got each answer ("Claim ok",
	// "MarkUnknown STALE_ATTEMPT", "Resolve maybe").
	Counts map[string]int
	// Visualization is the HTML file written for an Illegal history.
	Visualization string
	// Explanation says in words where an Illegal history fails (Explain).
	Explanation string
	// Elapsed is the whole run's time, CheckElapsed the check's alone.
	Elapsed      time.Duration
	CheckElapsed time.Duration
}

// Run runs the workload, then checks the history. dir receives the
// visualization of an Illegal history; name names the file.
func Run(ctx context.Context, cfg Config, dir, name string) (*Result, error) {
	if cfg.PerRound <= 0 {
		cfg.PerRound = 2
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 10 * time.Second
	}
	if cfg.ExternalIDs <= 0 {
		cfg.ExternalIDs = 4
	}
	start := time.Now()
	rec := &recorder{start: start}
	rnd := rand.New(rand.NewPCG(cfg.Seed, 0x6c696e))
	workers := make([]*worker, cfg.Workers)
	for i := range workers {
		workers[i] = &worker{id: i, cfg: &cfg, rnd: rand.New(rand.NewPCG(cfg.Seed, uint64(i)+1)), attempts: map[string]int{}, rec: rec}
	}
	nowOf := func() int64 {
		if cfg.Clock == nil {
			return model.TimeUnknown
		}
		return cfg.Clock.Now().Sub(cfg.Base).Milliseconds()
	}
	// Every key exists from the start (the commands on an unknown key are
	// drawn anyway, with the workload's attempts); the duplicate race
	// starts from confirmed effects.
	for _, k := range cfg.Keys {
		reg := model.Input{Kind: model.Register, Key: k.Key, Action: k.Action, Now: nowOf()}
		if cfg.Workload == DuplicateRace {
			reg.Claim, reg.Worker = true, "w0"
		}
		workers[0].do(ctx, reg)
		if cfg.Workload == DuplicateRace {
			workers[0].do(ctx, model.Input{Kind: model.MarkSucceeded, Key: k.Key, Attempt: 1, ExternalID: "x0", Now: nowOf(), REST: true})
		}
	}
	for done := 0; done < cfg.Ops; done += cfg.PerRound {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n := min(cfg.PerRound, cfg.Ops-done)
		if cfg.Clock == nil {
			n = cfg.Ops // one round: time is not the test's
		}
		t := nowOf()
		var wg sync.WaitGroup
		for _, w := range workers {
			wg.Go(func() {
				for range n {
					w.one(ctx, t)
				}
			})
		}
		wg.Wait()
		if cfg.Clock == nil {
			break
		}
		if len(cfg.Steps) > 0 {
			cfg.Clock.Advance(time.Duration(cfg.Steps[rnd.IntN(len(cfg.Steps))]) * time.Millisecond)
		}
	}
	// A last look at every key, one at a time: the end state is checked too.
	for _, k := range cfg.Keys {
		workers[0].do(ctx, model.Input{Kind: model.Lookup, Key: k.Key, Now: nowOf()})
		workers[0].do(ctx, model.Input{Kind: model.Lookup, Key: k.Key, Now: nowOf(), REST: true})
	}
	history := rec.history()
	res := &Result{History: history, Counts: map[string]int{}}
	for _, op := range history {
		in, out := op.Input.(model.Input), op.Output.(model.Output)
		a := "ok"
		switch {
		case out.Maybe:
			a = "maybe"
		case out.Err != "":
			a = out.Err
		}
		res.Counts[string(in.Kind)+" "+a]++
	}
	spec := porcupineModel(cfg.Model)
	checkStart := time.Now()
	res.Check, res.Info = porcupine.CheckOperationsVerbose(spec, history, 2*time.Minute)
	res.CheckElapsed = time.Since(checkStart)
	res.Elapsed = time.Since(start)
	if res.Check == porcupine.Illegal {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return res, err
		}
		path := filepath.Join(dir, fmt.Sprintf("linearize-%s-%d.html", name, time.Now().UnixNano()))
		if err := porcupine.VisualizePath(spec, res.Info, path); err != nil {
			return res, err
		}
		res.Visualization = path
		res.Explanation = Explain(cfg.Model, history, res.Info)
	}
	return res, nil
}

// CountsTable renders Counts sorted, for a test's log.
func (r *Result) CountsTable() string {
	keys := make([]string, 0, len(r.Counts))
	for k := range r.Counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%d ", k, r.Counts[k])
	}
	return b.String()
}

// recorder collects the calls of every worker.
type recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

func (r *recorder) add(op porcupine.Operation) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

// history returns the calls; a Maybe call returns after every other call
// (porcupine's way to say it may take effect at any point after its call,
// or never: a linearization may place it last, where it changes nothing
// anyone saw).
func (r *recorder) history() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	var end int64
	for _, op := range r.ops {
		end = max(end, op.Return)
	}
	out := make([]porcupine.Operation, len(r.ops))
	for i, op := range r.ops {
		if maybe(op.Output) {
			op.Return = end + 1
		}
		out[i] = op
	}
	return out
}

// maybe reports whether an answer (the per-key model's or the budget
// model's) left the outcome open.
func maybe(out any) bool {
	switch o := out.(type) {
	case model.Output:
		return o.Maybe
	case model.BudgetOutput:
		return o.Maybe
	}
	panic(fmt.Sprintf("linearize: unknown answer %T", out))
}

type worker struct {
	id       int
	cfg      *Config
	rnd      *rand.Rand
	attempts map[string]int // the latest attempt count this worker saw per key
	rec      *recorder
}

func (w *worker) do(ctx context.Context, in model.Input) {
	c := w.cfg.Clients[w.rnd.IntN(len(w.cfg.Clients))]
	cctx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
	call := time.Since(w.rec.start).Nanoseconds()
	out := c.Do(cctx, in)
	ret := time.Since(w.rec.start).Nanoseconds()
	cancel()
	if !out.Maybe && out.Err == "" {
		w.attempts[in.Key] = max(w.attempts[in.Key], out.Op.Attempts)
	}
	w.rec.add(porcupine.Operation{ClientId: w.id, Input: in, Call: call, Output: out, Return: ret})
}

// one draws a command and sends it.
func (w *worker) one(ctx context.Context, now int64) {
	r := w.rnd
	k := w.cfg.Keys[r.IntN(len(w.cfg.Keys))]
	in := model.Input{Key: k.Key, Now: now, REST: r.IntN(2) == 0, Worker: fmt.Sprintf("w%d", w.id)}
	in.Kind = w.kind()
	if in.Kind == model.Expire && !w.cfg.Clients[0].CanExpire() {
		in.Kind = model.Lookup // a journal in another process: its own sweep (off) would be a call nobody recorded
	}
	act := w.cfg.Model.Actions[k.Action]
	switch in.Kind {
	case model.Register:
		in.Action, in.Claim = k.Action, r.IntN(2) == 0
		if r.IntN(10) == 0 {
			in.Payload = 1
		}
	}
	switch in.Kind {
	case model.Register, model.Claim, model.ExtendLease:
		if r.IntN(4) == 0 {
			in.Lease = 1 + r.IntN(int(act.LeaseMS/1000))
		}
	}
	// Mostly the latest attempt this worker knows of, sometimes an older,
	// a newer or an invalid one.
	a := w.attempts[k.Key]
	switch p := r.IntN(10); {
	case p < 6:
		in.Attempt = max(a, 1)
	case p < 8:
		in.Attempt = 1 + r.IntN(max(a, 1))
	case p < 9:
		in.Attempt = a + 1
	default:
		in.Attempt = r.IntN(2) // 0: invalid; 1
	}
	in.ExternalID = w.externalID()
	switch in.Kind {
	case model.MarkUnknown, model.MarkFailedFinal:
		in.ErrorCode = []string{"", "timeout", "card_declined"}[r.IntN(3)]
	case model.Resolve:
		if r.IntN(2) == 0 {
			in.Resolution = model.Succeeded
			if in.ExternalID == "" {
				in.ExternalID = "x1"
			}
		} else {
			in.Resolution, in.ExternalID = model.FailedFinal, ""
			in.ErrorCode = []string{"", "refunded"}[r.IntN(2)]
		}
	case model.RecordCheck:
		in.CheckAfter = 1 + r.IntN(30)
	case model.Approve, model.Reject:
		// The approvers are a few people, so that one meets itself under
		// two_person; now and then one saw another request's hash.
		in.Action, in.Worker = k.Action, fmt.Sprintf("p%d", r.IntN(3))
		if r.IntN(6) == 0 {
			in.Payload = 1
		}
		if in.Kind == model.Reject {
			in.ErrorCode = []string{"", "not_wanted"}[r.IntN(2)]
		}
	}
	switch in.Kind {
	case model.MarkSucceeded, model.Resolve:
	default:
		in.ExternalID = ""
	}
	w.do(ctx, in)
}

func (w *worker) externalID() string {
	if w.rnd.IntN(10) == 0 {
		return ""
	}
	return fmt.Sprintf("x%d", 1+w.rnd.IntN(w.cfg.ExternalIDs))
}

var weights = map[Workload][]struct {
	k model.Kind
	w int
}{
	Mixed: {{model.Register, 10}, {model.Claim, 12}, {model.ExtendLease, 6}, {model.MarkSucceeded, 12}, {model.MarkUnknown, 8}, {model.MarkFailedFinal, 5},
		{model.RecordCheck, 6}, {model.ReleaseForRetry, 6}, {model.Escalate, 5}, {model.Resolve, 6}, {model.Acknowledge, 8}, {model.Lookup, 8},
		{model.Approve, 8}, {model.Reject, 2}, {model.Expire, 4}},
	DuplicateRace: {{model.Register, 3}, {model.Claim, 2}, {model.MarkSucceeded, 40}, {model.Acknowledge, 30}, {model.MarkFailedFinal, 2}, {model.Lookup, 5},
		{model.Escalate, 2}, {model.Resolve, 2}},
}

func (w *worker) kind() model.Kind {
	ws := weights[w.cfg.Workload]
	total := 0
	for _, e := range ws {
		total += e.w
	}
	n := w.rnd.IntN(total)
	for _, e := range ws {
		if n < e.w {
			return e.k
		}
		n -= e.w
	}
	return model.Lookup
}

// FirstDisagreement replays a history whose calls never overlapped (one
// worker) in call order and describes the first answer the model would
// not give, or returns "" when the model gives every one. It makes a
// model's or the journal's mistake readable without the visualization.
func FirstDisagreement(m *model.Model, history []porcupine.Operation) string {
	ops := slices.Clone(history)
	sort.Slice(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	states := map[string]model.State{}
	for _, op := range ops {
		in, out := op.Input.(model.Input), op.Output.(model.Output)
		want, next := m.Step(states[in.Key], in)
		if !out.Maybe && !model.Agree(want, out, in.Now != model.TimeUnknown) {
			return fmt.Sprintf("state %+v\ncall  %s\nwant  %s", states[in.Key], model.Describe(in, out), model.Describe(in, want))
		}
		states[in.Key] = next
	}
	return ""
}

// Explain describes where an Illegal history fails: for the key whose
// calls cannot all be ordered, the end of the longest order found (with
// the model's state after it) and the earliest calls no order could add.
func Explain(m *model.Model, history []porcupine.Operation, info porcupine.LinearizationInfo) string {
	byKey := map[string]int{}
	for _, op := range history {
		byKey[op.Input.(model.Input).Key]++
	}
	var b strings.Builder
	for _, part := range info.PartialLinearizationsOperations() {
		var longest []porcupine.Operation
		for _, l := range part {
			if len(l) > len(longest) {
				longest = l
			}
		}
		if len(longest) == 0 {
			continue
		}
		key := longest[0].Input.(model.Input).Key
		if len(longest) == byKey[key] {
			continue
		}
		placed := map[porcupine.Operation]bool{}
		st := model.State{}
		for _, op := range longest {
			placed[op] = true
			_, st = m.Step(st, op.Input.(model.Input))
		}
		fmt.Fprintf(&b, "key %s: %d of its %d calls ordered; the order ends with:\n", key, len(longest), byKey[key])
		for _, op := range longest[max(0, len(longest)-8):] {
			fmt.Fprintf(&b, "  [w%d] %s\n", op.ClientId, model.Describe(op.Input.(model.Input), op.Output.(model.Output)))
		}
		fmt.Fprintf(&b, "model state then: %+v\nno order can add next any of:\n", st)
		var rest []porcupine.Operation
		for _, op := range history {
			if op.Input.(model.Input).Key == key && !placed[op] {
				rest = append(rest, op)
			}
		}
		sort.Slice(rest, func(i, j int) bool { return rest[i].Call < rest[j].Call })
		for _, op := range rest[:min(len(rest), 4)] {
			in := op.Input.(model.Input)
			want, _ := m.Step(st, in)
			fmt.Fprintf(&b, "  [w%d] %s\n      (the model there: %s)\n", op.ClientId, model.Describe(in, op.Output.(model.Output)), model.Describe(in, want))
		}
	}
	return b.String()
}
