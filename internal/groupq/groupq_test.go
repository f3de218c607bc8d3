package groupq

import (
	"sync"
	"testing"

	"github.com/opjournal/opjournal/internal/testkit/await"
)

// TestQueueBatchesWhatWaitsAndHandsBackTheRest: calls added while the one
// slot is taken run together, in order, in batches of at most max; after
// Close nothing is accepted and nothing runs.
func TestQueueBatchesWhatWaitsAndHandsBackTheRest(t *testing.T) {
	var mu sync.Mutex
	var ran [][]int
	q := New(1, 3, func(batch []int) {
		mu.Lock()
		ran = append(ran, batch)
		mu.Unlock()
	})
	if !q.TryAlone() {
		t.Fatal("an idle queue refused TryAlone")
	}
	if q.TryAlone() {
		t.Fatal("TryAlone took a second slot of one")
	}
	for i := range 5 {
		if !q.Add(i) {
			t.Fatal("Add refused on an open queue")
		}
	}
	if _, _, w := q.Stats(); w != 5 {
		t.Fatalf("%d waiting, want 5", w)
	}
	q.Finished() // the slot frees: the worker takes 3, then 2
	await.Until(t, "the queue to empty", func() bool { _, _, w := q.Stats(); return w == 0 })
	await.Until(t, "both batches to run", func() bool { mu.Lock(); defer mu.Unlock(); return len(ran) == 2 })
	mu.Lock()
	if len(ran[0]) != 3 || len(ran[1]) != 2 || ran[0][0] != 0 || ran[1][1] != 4 {
		t.Errorf("batches %v, want [0 1 2] then [3 4]", ran)
	}
	mu.Unlock()
	if b, c, _ := q.Stats(); b != 3 || c != 6 {
		t.Errorf("stats: %d batches with %d calls, want 3 with 6 (TryAlone's included)", b, c)
	}

	q.TryAlone() // hold the slot so that what is added stays queued
	q.Add(7)
	if pending := q.Close(); len(pending) != 1 || pending[0] != 7 {
		t.Errorf("Close returned %v, want [7]", pending)
	}
	if q.Add(8) || q.TryAlone() {
		t.Error("a closed queue accepted a call")
	}
	if pending := q.Close(); pending != nil {
		t.Errorf("second Close returned %v", pending)
	}
}
