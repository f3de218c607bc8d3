package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/opjournal/opjournal/store"
	"github.com/opjournal/opjournal/store/sqlite"
	"github.com/opjournal/opjournal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		path := filepath.Join(t.TempDir(), "journal.db")
		return func(t *testing.T) store.Store {
			s, err := sqlite.Open(context.Background(), path)
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
	})
}

// TestModel checks the store against the protocol's pure model
// (storetest.RunModel).
func TestModel(t *testing.T) {
	storetest.RunModel(t, func(t *testing.T) store.Store {
		s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "journal.db"))
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}
