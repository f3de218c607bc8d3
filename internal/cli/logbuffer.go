package cli

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// BufferedLog is a logger whose lines are written by a goroutine of its
// own (NewBufferedLogger).
type BufferedLog struct {
	// Logger is the logger to use.
	Logger *slog.Logger
	w      *logBuffer
	once   sync.Once
}

// NewBufferedLogger is NewLogger writing through a bounded buffer that a
// goroutine of its own writes out: a server logs a line for every change
// (the audit line), and neither a write system call per line nor a slow
// reader of w (a full pipe, a stalled log shipper) may hold up the call
// that logged it. A call only copies its line into the buffer.
//
// Lines reach w within flushInterval, warnings and errors at once, and all
// of them on Flush and Stop. The buffer holds at most logBufferLimit bytes
// that w has not taken yet; a line beyond it is dropped, never silently:
// Dropped counts them (the server exports it as a metric) and a warning
// saying how many is written as soon as w takes lines again. A process
// killed with SIGKILL may lose the last flushInterval of lines; the
// journal's history in the database is the record of every change, the
// log its operational echo.
func NewBufferedLogger(level, format string, w io.Writer) (*BufferedLog, error) {
	return newBufferedLog(level, format, w, logBufferLimit, flushInterval)
}

func newBufferedLog(level, format string, w io.Writer, limit int, every time.Duration) (*BufferedLog, error) {
	lb := newLogBuffer(w, limit)
	log, err := NewLogger(level, format, lb)
	if err != nil {
		return nil, err
	}
	// The dropped-lines warning goes straight to w, after the lines
	// before it: through the buffer it could be dropped itself.
	if lb.direct, err = NewLogger(level, format, w); err != nil {
		return nil, err
	}
	b := &BufferedLog{Logger: slog.New(&flushingHandler{Handler: log.Handler(), w: lb}), w: lb}
	go lb.run(every)
	return b, nil
}

// Flush writes out the buffered lines before it returns (say, after the
// line that others wait for).
func (b *BufferedLog) Flush() { b.w.drain(false) }

// Stop writes out the buffered lines and ends the writing goroutine; lines
// logged after it are written by the caller, at once.
func (b *BufferedLog) Stop() {
	b.once.Do(func() {
		close(b.w.stop)
		<-b.w.done
	})
}

// Dropped is the number of lines dropped so far because w fell behind by
// more than the buffer holds.
func (b *BufferedLog) Dropped() uint64 { return b.w.dropped.Load() }

// flushInterval bounds how long a buffered log line waits.
const flushInterval = 100 * time.Millisecond

// logBufferLimit is how many bytes of lines may wait for w: about 20,000
// audit lines, two seconds of the busiest server's mutations.
const logBufferLimit = 4 << 20

// kickBytes is how much buffered output wakes the writer before its tick.
const kickBytes = 64 << 10

// logBuffer is the writer behind a BufferedLog. slog's handlers write one
// whole line per Write, so lines never interleave, and they are written to
// w in the order they were logged.
type logBuffer struct {
	w      io.Writer
	limit  int
	direct *slog.Logger // writes to w itself, for the dropped-lines warning

	mu      sync.Mutex
	buf     []byte // lines not yet taken by the writer
	spare   []byte // the other buffer, reused
	lost    uint64 // lines dropped since the last warning
	stopped bool   // the goroutine has ended: Write writes through

	wmu     sync.Mutex // one writer of w at a time, in order
	dropped atomic.Uint64
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

func newLogBuffer(w io.Writer, limit int) *logBuffer {
	return &logBuffer{w: w, limit: limit, kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
}

// Write copies the line into the buffer; it never waits for w (but for
// the short copy of another line).
func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		b.wmu.Lock()
		defer b.wmu.Unlock()
		return b.w.Write(p)
	}
	if len(b.buf)+len(p) > b.limit {
		b.lost++
		b.mu.Unlock()
		b.dropped.Add(1)
		return len(p), nil
	}
	b.buf = append(b.buf, p...)
	n := len(b.buf)
	b.mu.Unlock()
	if n >= kickBytes {
		b.wake()
	}
	return len(p), nil
}

// wake asks the writer to write out the buffer now, without waiting.
func (b *logBuffer) wake() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// drain writes out what is buffered, then the warning for the lines
// dropped since the last one, if any; wmu is held throughout, so the
// warning follows the lines before it. With last, every later Write
// writes through instead, and cannot overtake a buffered line.
func (b *logBuffer) drain(last bool) {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	b.mu.Lock()
	out, lost := b.buf, b.lost
	b.buf, b.spare, b.lost = b.spare[:0], nil, 0
	b.stopped = b.stopped || last
	b.mu.Unlock()
	if len(out) > 0 {
		_, _ = b.w.Write(out)
	}
	if lost > 0 {
		b.direct.LogAttrs(context.Background(), slog.LevelWarn, "log lines dropped: the log's output fell behind",
			slog.Uint64("dropped", lost))
	}
	if cap(out) <= 2*kickBytes { // a burst's big buffer is not kept
		b.mu.Lock()
		b.spare = out[:0]
		b.mu.Unlock()
	}
}

func (b *logBuffer) run(every time.Duration) {
	defer close(b.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			b.drain(true)
			return
		case <-t.C:
		case <-b.kick:
		}
		b.drain(false)
	}
}

// flushingHandler has warnings and errors written at once, rather than at
// the next tick, so those are never delayed; the caller still does not
// wait for w.
type flushingHandler struct {
	slog.Handler
	w *logBuffer
}

func (h *flushingHandler) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Level >= slog.LevelWarn {
		h.w.wake()
	}
	return err
}

func (h *flushingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &flushingHandler{Handler: h.Handler.WithAttrs(attrs), w: h.w}
}

func (h *flushingHandler) WithGroup(name string) slog.Handler {
	return &flushingHandler{Handler: h.Handler.WithGroup(name), w: h.w}
}
