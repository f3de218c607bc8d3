package soak

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// The three actions of the soak policy, and how each reaches the provider.
var actions = []struct {
	name       string // action type in the policy
	short      string // in the operation key
	path       string // provider route
	idempotent bool   // Idempotency-Key (payments) or a reference field
	weight     int    // share of intents, in percent
}{
	{"create_payment", "pay", "/payments", true, 50},
	{"send_email", "email", "/emails", false, 30},
	{"submit_application", "app", "/applications", false, 20},
}

// LargeMemberBytes is the size of the "attachment" member of a
// large-payload intent (Mix.Large): with the other members, the payload
// stays just below the journal's payload limit of 64 KiB of canonical JSON
// (opjournal.DefaultMaxPayloadBytes).
const LargeMemberBytes = 60_000

// Intent is one business intent of a simulated agent. Everything in it is
// a function of the seed and the intent's number, so an agent that lost
// its memory rebuilds it from the operation key alone (IntentForKey).
type Intent struct {
	// N numbers the intents of a run from 0.
	N int
	// Key is the operation key: soak:<seed>:<pay|email|app>:<n>:intent-01.
	Key string
	// Action is the policy's action type.
	Action string
	// Path is the provider's route for it.
	Path string
	// Idempotent says the provider deduplicates by Idempotency-Key; the
	// others get the key in their "reference" field.
	Idempotent bool
	// Payload is the request: the same for every retry of the intent.
	Payload map[string]any
	// Dup: two agents are given this intent at once.
	Dup bool
	// Storm: each retry round is a burst of StormSize immediate retries.
	Storm     bool
	StormSize int
	// Restart: the agent crashes CrashAfter into its first call.
	Restart    bool
	CrashAfter time.Duration
	// Timeout is how long the agent waits for the provider (see
	// Config.AgentTimeout: longer on the routes with slow-lease faults).
	Timeout time.Duration
	// Large: Payload carries an "attachment" of LargeMemberBytes.
	Large bool
}

// NewIntent returns intent n of the run with this seed.
func NewIntent(cfg Config, n int) Intent {
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x696e74656e74^uint64(n)))
	pick := rng.IntN(100)
	a := actions[len(actions)-1]
	for _, c := range actions {
		if pick < c.weight {
			a = c
			break
		}
		pick -= c.weight
	}
	in := Intent{
		N:          n,
		Key:        fmt.Sprintf("soak:%d:%s:%d:intent-01", cfg.Seed, a.short, n),
		Action:     a.name,
		Path:       a.path,
		Idempotent: a.idempotent,
		Timeout:    cfg.plan(a.name).agentTimeout,
	}
	m := cfg.Mix
	in.Dup = rng.Float64() < m.Dup
	in.Storm = rng.Float64() < m.Storm
	in.StormSize = 3 + rng.IntN(5)
	in.Restart = rng.Float64() < m.Restart
	crashWithin := cfg.AgentTimeout
	if rng.Float64() < m.Impatient {
		in.Timeout, crashWithin = cfg.ShortAgentTimeout, cfg.ShortAgentTimeout
	}
	in.CrashAfter = time.Duration(rng.Int64N(int64(crashWithin)))
	declined := rng.Float64() < m.Decline
	switch a.short {
	case "pay":
		currencies := []string{"RUB", "EUR", "USD"}
		in.Payload = map[string]any{
			"order_id":     strconv.Itoa(n),
			"amount_minor": 100 + rng.IntN(1_000_000),
			"currency":     currencies[rng.IntN(len(currencies))],
		}
		if declined {
			in.Payload["card"] = "declined"
		}
	case "email":
		in.Payload = map[string]any{
			"to":      fmt.Sprintf("customer-%d@example.com", rng.IntN(1_000_000)),
			"subject": fmt.Sprintf("Receipt for order %d", n),
		}
	default:
		in.Payload = map[string]any{
			"job_id":    fmt.Sprintf("job-%d", rng.IntN(10_000)),
			"candidate": fmt.Sprintf("candidate-%d", n),
		}
	}
	// Drawn last, so that the draws above do not depend on it.
	if rng.Float64() < m.Large {
		in.Large = true
		in.Payload["attachment"] = largeMember(cfg.Seed, n)
	}
	return in
}

// largeMember is the attachment of intent n: LargeMemberBytes of
// base64-alphabet text (no character JSON escapes, so the canonical JSON
// is as long as the text), from a generator of its own seeded by the
// run's seed and n.
func largeMember(seed int64, n int) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6c61726765^uint64(n)))
	b := make([]byte, LargeMemberBytes)
	for i := 0; i < len(b); {
		v := rng.Uint64()
		for j := 0; j < 10 && i < len(b); j++ {
			b[i] = alphabet[v&63]
			v >>= 6
			i++
		}
	}
	return string(b)
}

// IntentForKey rebuilds an intent from its operation key, as an agent that
// restarted without any memory does. It fails for a key of another run.
func IntentForKey(cfg Config, key string) (Intent, error) {
	parts := strings.Split(key, ":")
	if len(parts) != 5 || parts[0] != "soak" || parts[1] != strconv.FormatInt(cfg.Seed, 10) || parts[4] != "intent-01" {
		return Intent{}, fmt.Errorf("soak: %q is not an intent key of seed %d", key, cfg.Seed)
	}
	n, err := strconv.Atoi(parts[3])
	if err != nil || n < 0 {
		return Intent{}, fmt.Errorf("soak: %q: bad intent number", key)
	}
	in := NewIntent(cfg, n)
	if in.Key != key {
		return Intent{}, fmt.Errorf("soak: %q: intent %d of seed %d is %q", key, n, cfg.Seed, in.Key)
	}
	return in, nil
}
