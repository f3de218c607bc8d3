package journal

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/store/sqlite"
)

// TestSchemaValidatedOncePerRequest: a request that passed create_payment's
// payload_schema is remembered by its request hash and not validated
// again when replayed; a refused one is refused every time and never
// remembered; another payload is another request.
func TestSchemaValidatedOncePerRequest(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "j.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc := New(st, policy.Default(), Limits{}, WithReplayCache(ReplayCacheConfig{Size: 0}))
	ctx := context.Background()
	remembered := func() int {
		svc.schemas.mu.Lock()
		defer svc.schemas.mu.Unlock()
		return svc.schemas.lru.Len()
	}
	reg := func(key, payload string) error {
		_, err := svc.Register(ctx, RegisterRequest{Key: key, Action: "create_payment", Payload: json.RawMessage(payload)})
		return err
	}
	good := `{"order_id":"817","amount_minor":490000,"currency":"RUB"}`
	for range 3 {
		if err := reg("pay-1", good); err != nil {
			t.Fatal(err)
		}
	}
	if n := remembered(); n != 1 {
		t.Fatalf("after a request and two replays: %d remembered, want 1", n)
	}
	for range 2 {
		if err := reg("pay-2", `{"order_id":"817","amount_minor":490000,"currency":"rub"}`); opjournal.ErrorCode(err) != opjournal.CodeInvalidArgument {
			t.Fatalf("a payload the schema refuses: %v", err)
		}
	}
	if err := reg("pay-3", `{"order_id":"818","amount_minor":490000,"currency":"RUB"}`); err != nil {
		t.Fatal(err)
	}
	if n := remembered(); n != 2 {
		t.Fatalf("after a refusal and another request: %d remembered, want 2", n)
	}
}
