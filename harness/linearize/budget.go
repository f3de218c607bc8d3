package linearize

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol/model"
	"github.com/opjournal/opjournal/protocol/policy"
)

// The budget run: concurrent agents register operations that charge one
// budget (each with a claim), replay earlier keys, fail some admitted
// operations for good (which gives their amounts back) and read the
// counter, on several journals over one database; porcupine then searches
// for a sequential order of the calls, consistent with real time, in
// which the budget counter's model (model.BudgetModel) gives every answer.
// Admitting past the limit under a race, a replay that reserves again or a
// release seen too early or too late has no such order.

// The budget run's action, its budget and the budget's limit.
const (
	BudgetAction = "pay_budget"
	BudgetName   = "run-spend"
	BudgetLimit  = 1000
)

// BudgetPolicy is the policy of the budget runs: one action whose
// operations charge the budget run-spend, the sum of payload.amount_minor,
// per payload.run (each run has a counter of its own, so that runs on one
// database never meet), with a window and leases far longer than a run
// (the model's clock stands still) and on_exceed reject.
var BudgetPolicy = `
actions:
  ` + BudgetAction + `:
    operation_key: required
    lease_seconds: 3600
    max_attempt_seconds: 7200
    retry:
      reuse_operation_key: true
      on_timeout: retry_same_key
    unknown_after_seconds: 7200
    retention: 720h
    integer_fields: [amount_minor]
    budgets:
      - name: ` + BudgetName + `
        sum: amount_minor
        per: [payload.run]
        window: 24h
        limit: ` + strconv.Itoa(BudgetLimit) + `
        on_exceed: reject
`

// BudgetModelOf is the counter's model of run-spend in pol.
func BudgetModelOf(pol *policy.Policy) (*model.BudgetModel, error) {
	act, ok := pol.Action(BudgetAction)
	if !ok {
		return nil, fmt.Errorf("linearize: the policy has no action %s", BudgetAction)
	}
	b := act.Budget(BudgetName)
	if b == nil || b.OnExceed != policy.BudgetExceedReject {
		return nil, fmt.Errorf("linearize: action %s needs budget %s with on_exceed reject", BudgetAction, BudgetName)
	}
	return &model.BudgetModel{Limit: b.Limit}, nil
}

// BudgetConfig is one budget run.
type BudgetConfig struct {
	// Clients are the journals' doors; each call picks one at random.
	Clients []*Client
	Model   *model.BudgetModel
	// Run names the run's counter (payload.run) and prefixes its keys.
	Run     string
	Workers int
	// Ops is how many calls each worker makes.
	Ops         int
	Seed        uint64
	CallTimeout time.Duration
}

// budgetKey is a key of the run and the amount its request charges.
type budgetKey struct {
	key    string
	amount int64
}

// budgetKeys draws the run's keys: amounts from 10 to 90 until they add
// up to twice the limit, so that about half of them fit.
func budgetKeys(run string, limit int64, rnd *rand.Rand) []budgetKey {
	var ks []budgetKey
	var total int64
	for total < 2*limit {
		a := 10 + rnd.Int64N(81)
		ks = append(ks, budgetKey{key: fmt.Sprintf("%s-%d", run, len(ks)), amount: a})
		total += a
	}
	return ks
}

// RunBudget runs the budget workload, then checks the history. dir
// receives the visualization of an Illegal history; name names the file.
func RunBudget(ctx context.Context, cfg BudgetConfig, dir, name string) (*Result, error) {
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 10 * time.Second
	}
	start := time.Now()
	rec := &recorder{start: start}
	keys := budgetKeys(cfg.Run, cfg.Model.Limit, rand.New(rand.NewPCG(cfg.Seed, 0x627564)))
	var next atomic.Int64 // keys[:next] have been handed out
	workers := make([]*budgetWorker, cfg.Workers)
	for i := range workers {
		workers[i] = &budgetWorker{id: i, cfg: &cfg, rnd: rand.New(rand.NewPCG(cfg.Seed, uint64(i)+1)), rec: rec, keys: keys, next: &next}
	}
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() {
			for range cfg.Ops {
				if ctx.Err() != nil {
					return
				}
				w.one(ctx)
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// A last look at the counter through both doors, after every call:
	// the end state is checked too.
	workers[0].do(ctx, model.BudgetInput{Kind: model.BudgetRead})
	workers[0].do(ctx, model.BudgetInput{Kind: model.BudgetRead, REST: true})
	history := rec.history()
	res := &Result{History: history, Counts: map[string]int{}}
	for _, op := range history {
		in, out := op.Input.(model.BudgetInput), op.Output.(model.BudgetOutput)
		a := "ok"
		switch {
		case out.Maybe:
			a = "maybe"
		case out.Err != "":
			a = out.Err
		case in.Kind == model.BudgetRegister && out.Created:
			a = "admitted"
		case in.Kind == model.BudgetRegister:
			a = "replayed"
		}
		res.Counts[string(in.Kind)+" "+a]++
	}
	checkStart := time.Now()
	res.Check, res.Info = CheckBudgetHistory(cfg.Model, history, 2*time.Minute)
	res.CheckElapsed = time.Since(checkStart)
	res.Elapsed = time.Since(start)
	if res.Check == porcupine.Illegal {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return res, err
		}
		path := filepath.Join(dir, fmt.Sprintf("linearize-%s-%d.html", name, time.Now().UnixNano()))
		if err := porcupine.VisualizePath(budgetPorcupineModel(cfg.Model), res.Info, path); err != nil {
			return res, err
		}
		res.Visualization = path
		res.Explanation = ExplainBudget(cfg.Model, history, res.Info)
	}
	return res, nil
}

type budgetWorker struct {
	id   int
	cfg  *BudgetConfig
	rnd  *rand.Rand
	rec  *recorder
	keys []budgetKey
	next *atomic.Int64
	// admitted are the keys this worker registered and saw admitted, not
	// yet failed by it.
	admitted []budgetKey
}

func (w *budgetWorker) do(ctx context.Context, in model.BudgetInput) model.BudgetOutput {
	c := w.cfg.Clients[w.rnd.IntN(len(w.cfg.Clients))]
	cctx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
	call := time.Since(w.rec.start).Nanoseconds()
	out := c.DoBudget(cctx, w.cfg.Run, in)
	ret := time.Since(w.rec.start).Nanoseconds()
	cancel()
	w.rec.add(porcupine.Operation{ClientId: w.id, Input: in, Call: call, Output: out, Return: ret})
	return out
}

// handedOut returns a key registered before (or being registered), or
// false when there is none yet.
func (w *budgetWorker) handedOut() (budgetKey, bool) {
	n := min(int(w.next.Load()), len(w.keys))
	if n == 0 {
		return budgetKey{}, false
	}
	return w.keys[w.rnd.IntN(n)], true
}

// one draws a call and sends it: mostly a new key (while there are new
// keys), then replays of earlier keys (sometimes under another amount),
// definitive failures of admitted operations, and reads of the counter.
func (w *budgetWorker) one(ctx context.Context) {
	r := w.rnd
	in := model.BudgetInput{REST: r.IntN(2) == 0, Worker: fmt.Sprintf("w%d", w.id)}
	p := r.IntN(100)
	switch {
	case p < 50:
		if i := w.next.Add(1) - 1; int(i) < len(w.keys) {
			k := w.keys[i]
			in.Kind, in.Key, in.Amount, in.Claim = model.BudgetRegister, k.key, k.amount, true
			if out := w.do(ctx, in); out.Created && out.Claimed {
				w.admitted = append(w.admitted, k)
			}
			return
		}
		fallthrough
	case p < 70:
		k, ok := w.handedOut()
		if !ok {
			in.Kind = model.BudgetRead
			break
		}
		// A replay; a key refused before is a new registration again.
		in.Kind, in.Key, in.Amount, in.Claim = model.BudgetRegister, k.key, k.amount, r.IntN(2) == 0
		if r.IntN(8) == 0 {
			in.Amount++ // another request under the key
		}
		if out := w.do(ctx, in); out.Created && out.Claimed {
			w.admitted = append(w.admitted, k)
		}
		return
	case p < 80:
		in.Kind, in.Attempt = model.BudgetFail, 1
		switch {
		case len(w.admitted) > 0 && r.IntN(4) != 0:
			i := r.IntN(len(w.admitted))
			in.Key = w.admitted[i].key
			w.admitted = slices.Delete(w.admitted, i, i+1)
		default: // another's, a refused one, or one failed already
			k, ok := w.handedOut()
			if !ok {
				in.Kind, in.Attempt = model.BudgetRead, 0
				break
			}
			in.Key = k.key
		}
	default:
		in.Kind = model.BudgetRead
	}
	w.do(ctx, in)
}

// CheckBudgetHistory checks a budget history against m: whether some
// sequential order of its calls, consistent with real time, gets every
// answer from the model.
func CheckBudgetHistory(m *model.BudgetModel, history []porcupine.Operation, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	return porcupine.CheckOperationsVerbose(budgetPorcupineModel(m), history, timeout)
}

// ExplainBudget describes where an Illegal budget history fails: the end
// of the longest order found, the counter's state after it and the
// earliest calls no order could add.
func ExplainBudget(m *model.BudgetModel, history []porcupine.Operation, info porcupine.LinearizationInfo) string {
	var longest []porcupine.Operation
	for _, part := range info.PartialLinearizationsOperations() {
		for _, l := range part {
			if len(l) > len(longest) {
				longest = l
			}
		}
	}
	var b strings.Builder
	placed := map[porcupine.Operation]bool{}
	var st model.BudgetState
	for _, op := range longest {
		placed[op] = true
		_, st = m.Step(st, op.Input.(model.BudgetInput))
	}
	fmt.Fprintf(&b, "%d of the %d calls ordered; the order ends with:\n", len(longest), len(history))
	for _, op := range longest[max(0, len(longest)-8):] {
		fmt.Fprintf(&b, "  [w%d] %s\n", op.ClientId, model.DescribeBudget(op.Input.(model.BudgetInput), op.Output.(model.BudgetOutput)))
	}
	fmt.Fprintf(&b, "the counter then: %s\nno order can add next any of:\n", st)
	var rest []porcupine.Operation
	for _, op := range history {
		if !placed[op] {
			rest = append(rest, op)
		}
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i].Call < rest[j].Call })
	for _, op := range rest[:min(len(rest), 4)] {
		in := op.Input.(model.BudgetInput)
		want, _ := m.Step(st, in)
		fmt.Fprintf(&b, "  [w%d] %s\n      (the model there: %s)\n", op.ClientId, model.DescribeBudget(in, op.Output.(model.BudgetOutput)), model.DescribeBudget(in, want))
	}
	return b.String()
}

// budgetPayload is the payload of a run's registration: the amount the
// budget adds up, and the run that scopes its counter.
func budgetPayload(run, key string, amount int64) *structpb.Struct {
	s, _ := structpb.NewStruct(map[string]any{"order_id": key, "amount_minor": float64(amount), "run": run})
	return s
}

// DoBudget sends in (over REST with in.REST, else gRPC) for the counter of
// run and returns the answer as the budget model sees it. An error that
// leaves the outcome open is Maybe.
func (c *Client) DoBudget(ctx context.Context, run string, in model.BudgetInput) model.BudgetOutput {
	var req, resp proto.Message
	var path string
	switch in.Kind {
	case model.BudgetRegister:
		r := &pb.RegisterRequest{OperationKey: in.Key, ActionType: BudgetAction, Payload: budgetPayload(run, in.Key, in.Amount)}
		if in.Claim {
			r.Claim = &pb.ClaimOptions{WorkerId: in.Worker}
		}
		req, resp, path = r, &pb.RegisterResponse{}, "/v1/operations:register"
	case model.BudgetFail:
		req = &pb.MarkFailedFinalRequest{OperationKey: in.Key, Attempt: int32(in.Attempt), ErrorCode: "card_declined"}
		resp, path = &pb.MarkFailedFinalResponse{}, "/v1/operations:markFailedFinal"
	case model.BudgetRead:
		req, resp = &pb.ListBudgetsRequest{ActionType: BudgetAction, Budget: BudgetName}, &pb.ListBudgetsResponse{}
		path = "/v1/budgets?" + url.Values{"action_type": {BudgetAction}, "budget": {BudgetName}}.Encode()
	default:
		panic("linearize: unknown budget call " + string(in.Kind))
	}
	var err error
	if in.REST {
		err = c.restBudget(ctx, path, req, resp)
	} else {
		err = c.grpcBudget(ctx, req, resp)
	}
	if err != nil {
		code, ok := refusal(err)
		if !ok {
			return model.BudgetOutput{Maybe: true}
		}
		out := model.BudgetOutput{Err: code}
		if code == "BUDGET_EXCEEDED" {
			used, uerr := strconv.ParseInt(refusalDetails(err)["used"], 10, 64)
			if uerr != nil {
				used = -1 // a refusal that does not name its use: no model answer has it
			}
			out.Used = used
		}
		return out
	}
	switch r := resp.(type) {
	case *pb.RegisterResponse:
		return model.BudgetOutput{Created: r.GetCreated(), Claimed: r.GetClaimed(), Status: statusName(r.GetOperation())}
	case *pb.MarkFailedFinalResponse:
		return model.BudgetOutput{Status: statusName(r.GetOperation())}
	case *pb.ListBudgetsResponse:
		var out model.BudgetOutput
		for _, u := range r.GetBudgets() {
			if budgetScopeRun(u.GetScope()) == run && u.GetBudget() == BudgetName {
				out.Used, out.ReservedUnknown, out.Operations = u.GetUsed(), u.GetReservedUnknown(), u.GetOperations()
			}
		}
		return out
	}
	return model.BudgetOutput{Maybe: true}
}

func statusName(op *pb.Operation) string {
	return strings.TrimPrefix(op.GetStatus().String(), "STATUS_")
}

// budgetScopeRun is the run a counter's scope names ("" for none).
func budgetScopeRun(scope string) string {
	var s map[string]string
	if scope == "" || json.Unmarshal([]byte(scope), &s) != nil {
		return ""
	}
	return s["payload.run"]
}

// refusalDetails returns the details of a refusal: the ErrorInfo's
// metadata over gRPC, the error's details over REST.
func refusalDetails(err error) map[string]string {
	var se *statusError
	if errors.As(err, &se) {
		return se.details
	}
	if st, ok := status.FromError(err); ok {
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == "opjournal" {
				return info.GetMetadata()
			}
		}
	}
	return nil
}

func (c *Client) grpcBudget(ctx context.Context, req, resp proto.Message) error {
	var got proto.Message
	var err error
	switch r := req.(type) {
	case *pb.RegisterRequest:
		got, err = c.grpc.Register(ctx, r)
	case *pb.MarkFailedFinalRequest:
		got, err = c.grpc.MarkFailedFinal(ctx, r)
	case *pb.ListBudgetsRequest:
		got, err = c.grpc.ListBudgets(ctx, r)
	}
	if err != nil {
		return err
	}
	proto.Merge(resp, got)
	return nil
}

// restBudget sends req to path (a GET when path has a query, else a POST
// of req as JSON) and reads the answer into resp.
func (c *Client) restBudget(ctx context.Context, path string, req, resp proto.Message) error {
	method, body := http.MethodGet, []byte(nil)
	if !strings.Contains(path, "?") {
		b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(req)
		if err != nil {
			return err
		}
		method, body = http.MethodPost, b
	}
	data, err := c.restRaw(ctx, method, path, body)
	if err != nil {
		return err
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, resp); err != nil {
		return fmt.Errorf("linearize: REST %s answer: %w", path, err)
	}
	return nil
}
