package postgres_test

import (
	"context"
	"testing"

	"github.com/opjournal/opjournal/internal/pgtest"
	"github.com/opjournal/opjournal/store"
	"github.com/opjournal/opjournal/store/postgres"
	"github.com/opjournal/opjournal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		url := pgtest.NewSchema(t)
		return func(t *testing.T) store.Store {
			s, err := postgres.Open(context.Background(), url)
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
	})
}
