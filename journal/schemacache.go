package journal

import (
	"encoding/json"
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/opjournal/opjournal/protocol/policy"
)

// schemaChecks remembers the requests this process has validated against
// their action's payload_schema, by action and request hash, so that a
// replay (a retry polling a pending or running operation, or a terminal
// one the replay cache did not hold) is not validated again: the hash
// covers the action and the whole canonical payload, the policy does not
// change while the process runs, and validation is a pure function of the
// two, so the same hash gets the same verdict. Only passes are kept; a
// refusal is recomputed, which costs what it did before.
type schemaChecks struct {
	mu  sync.Mutex
	lru *simplelru.LRU[schemaKey, struct{}]
}

// schemaKey is one validated request: the hash is under the key named
// (HashKeyID), so hashes under different keys never meet.
type schemaKey struct{ action, hashKeyID, hash string }

// schemaChecksSize bounds the requests remembered (about 200 bytes each).
const schemaChecksSize = 4096

func newSchemaChecks() *schemaChecks {
	l, err := simplelru.NewLRU[schemaKey, struct{}](schemaChecksSize, nil)
	if err != nil {
		panic(err) // only for a size ≤ 0
	}
	return &schemaChecks{lru: l}
}

// check is checkSchema(act, canonical) for the request whose hash is
// hash under hashKeyID, skipped when this process has passed it before.
func (sc *schemaChecks) check(act *policy.Action, hashKeyID, hash string, canonical json.RawMessage) error {
	if act.PayloadSchema == nil {
		return nil
	}
	k := schemaKey{act.Name, hashKeyID, hash}
	sc.mu.Lock()
	_, ok := sc.lru.Get(k)
	sc.mu.Unlock()
	if ok {
		return nil
	}
	if err := checkSchema(act, canonical); err != nil {
		return err
	}
	sc.mu.Lock()
	sc.lru.Add(k, struct{}{})
	sc.mu.Unlock()
	return nil
}
