package sqlite

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/store"
)

// TestWriterQueueIsBoundedByTheCaller: while another write holds this
// process's writer slot, a write waits for it only as long as its own
// context allows, then answers UNAVAILABLE having written nothing; once the
// slot is free the same write applies.
func TestWriterQueueIsBoundedByTheCaller(t *testing.T) {
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := store.RegisterParams{Key: "k", Action: "a", RequestHash: "h", Payload: json.RawMessage(`{}`)}

	s.writer <- struct{}{} // another write holds the slot
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = s.Register(ctx, p)
	if opjournal.ErrorCode(err) != opjournal.CodeUnavailable || time.Since(start) > 2*time.Second {
		t.Fatalf("register behind a held slot: %v after %s, want UNAVAILABLE at its deadline", err, time.Since(start))
	}
	if _, err := s.Get(context.Background(), "", "k"); opjournal.ErrorCode(err) != opjournal.CodeNotFound {
		t.Fatalf("after the refused register: %v, want NOT_FOUND", err)
	}
	<-s.writer // the slot is free
	if r, err := s.Register(context.Background(), p); err != nil || !r.Created {
		t.Fatalf("register with the slot free: %+v, %v", r, err)
	}
}
