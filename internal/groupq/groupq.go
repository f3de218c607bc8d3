// Package groupq is the queue behind the stores' group commit
// (store/postgres/batch.go, store/sqlite/groupcommit.go): calls of one kind
// that arrive while the database is busy with others wait here, and the
// next statement or transaction carries as many of them as are waiting.
//
// At most Workers batches run at once. A caller that finds none running
// and nobody waiting reserves a slot with TryAlone and runs its own call
// in its own goroutine, so a lone caller pays no hand-off. Calls added
// while batches run are taken by worker goroutines, up to Max per batch,
// in arrival order, until the queue is empty. The queue knows nothing of
// databases: run does the work and answers the calls.
package groupq

import (
	"slices"
	"sync"
)

// Queue holds calls of type C waiting for a batch.
type Queue[C any] struct {
	workers, max int
	run          func(batch []C) // runs one batch and answers its calls

	mu      sync.Mutex
	queue   []C
	running int // batches in flight, callers' own included
	closed  bool
	kick    chan struct{}
	quit    chan struct{}
	wg      sync.WaitGroup
	// batches and calls count what ran, TryAlone's included.
	batches, calls int64
}

// New starts workers goroutines that hand batches of at most max calls to
// run.
func New[C any](workers, max int, run func(batch []C)) *Queue[C] {
	q := &Queue[C]{workers: workers, max: max, run: run, kick: make(chan struct{}, 1), quit: make(chan struct{})}
	for range workers {
		q.wg.Go(q.work)
	}
	return q
}

// TryAlone reserves a slot for the caller if the queue is idle (fewer than
// workers batches in flight, nobody waiting). The caller then runs its
// call itself and must call Finished.
func (q *Queue[C]) TryAlone() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || q.running >= q.workers || len(q.queue) > 0 {
		return false
	}
	q.running++
	q.batches++
	q.calls++
	return true
}

// Add queues c for the next batch. It returns false, queueing nothing,
// once the queue is closed.
func (q *Queue[C]) Add(c C) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.queue = append(q.queue, c)
	q.mu.Unlock()
	q.wake()
	return true
}

// Finished ends a batch (or a TryAlone call) and wakes a worker for what
// queued meanwhile.
func (q *Queue[C]) Finished() {
	q.mu.Lock()
	q.running--
	more := len(q.queue) > 0
	q.mu.Unlock()
	if more {
		q.wake()
	}
}

// Stats reports the batches run, the calls they carried and the calls
// waiting now.
func (q *Queue[C]) Stats() (batches, calls, waiting int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.batches, q.calls, int64(len(q.queue))
}

// Close refuses new calls, stops the workers once their batch is done,
// and returns the calls still waiting, for the caller to run or answer.
// Closing twice is harmless (the second call returns nothing).
func (q *Queue[C]) Close() []C {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	q.mu.Unlock()
	close(q.quit)
	q.wg.Wait()
	q.mu.Lock()
	defer q.mu.Unlock()
	pending := q.queue
	q.queue = nil
	return pending
}

func (q *Queue[C]) wake() {
	select {
	case q.kick <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// take removes the next batch and counts it as running, or returns nil
// when the queue is empty or enough batches run already.
func (q *Queue[C]) take() []C {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.queue) == 0 || q.running >= q.workers {
		return nil
	}
	n := min(len(q.queue), q.max)
	batch := slices.Clone(q.queue[:n])
	q.queue = slices.Delete(q.queue, 0, n)
	q.running++
	q.batches++
	q.calls += int64(n)
	return batch
}

// work is one worker: whenever woken, run batches until the queue is
// empty (or the batches in flight leave no room).
func (q *Queue[C]) work() {
	for {
		select {
		case <-q.kick:
		case <-q.quit:
			return
		}
		for batch := q.take(); batch != nil; batch = q.take() {
			q.run(batch)
			q.Finished()
		}
	}
}
