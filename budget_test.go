package opjournal_test

import (
	"testing"
	"time"

	"github.com/opjournal/opjournal"
)

// TestBudgetWords: a budget's figures as every door words them.
func TestBudgetWords(t *testing.T) {
	for _, c := range []struct {
		used, limit int64
		want        string
	}{{0, 5, "0%"}, {3, 5, "60%"}, {1, 1000, "<1%"}, {999, 1000, ">99%"}, {5, 5, "100%"}, {11000, 10000, "110%"},
		{1 << 62, 1<<63 - 1, "50%"}, {1, 0, "-"}} {
		if got := opjournal.UsePercent(c.used, c.limit); got != c.want {
			t.Errorf("UsePercent(%d, %d) = %q, want %q", c.used, c.limit, got, c.want)
		}
	}
	for d, want := range map[time.Duration]string{24 * time.Hour: "24h", 7 * 24 * time.Hour: "7d", 30 * time.Minute: "30m",
		90 * time.Second: "1m30s", 48 * time.Hour: "48h", 72 * time.Hour: "3d", 0: "window"} {
		if got := opjournal.WindowWords(d); got != want {
			t.Errorf("WindowWords(%s) = %q, want %q", d, got, want)
		}
	}
}

// TestBudgetFreeAt: when a further amount fits, from the counted holds.
func TestBudgetFreeAt(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	u := opjournal.BudgetUsage{Limit: 10, Window: time.Hour, Used: 9,
		Holds: []opjournal.HeldAmount{{At: t0, Amount: 2}, {At: t0.Add(time.Minute), Amount: 3}, {At: t0.Add(2 * time.Minute), Amount: 4}}}
	for amount, want := range map[int64]time.Time{1: {}, 2: t0.Add(time.Hour), 4: t0.Add(time.Hour + time.Minute), 10: t0.Add(time.Hour + 2*time.Minute)} {
		at, ok := u.FreeAt(amount)
		if !ok || !at.Equal(want) {
			t.Errorf("FreeAt(%d) = %v %v, want %v", amount, at, ok, want)
		}
	}
	if _, ok := u.FreeAt(11); ok {
		t.Error("an amount over the limit fits")
	}
}
