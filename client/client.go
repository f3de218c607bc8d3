package client

import (
	"context"
	"fmt"
	"iter"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/internal/protocodec"
	"github.com/opjournal/opjournal/internal/tracing"
	opjournalv1 "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// recordTimeout bounds each Mark* call. It runs on a context detached from
// the caller's cancellation: the outcome must be recorded even after the
// caller gave up.
const recordTimeout = 10 * time.Second

// Client runs operations through an opjournal server. It is safe for
// concurrent use.
type Client struct {
	rpc          opjournalv1.JournalServiceClient
	workerID     string
	leaseSeconds int32
	token        string
	heartbeat    bool
	conn         *grpc.ClientConn // set by Dial, closed by Close
}

// Option configures a Client.
type Option func(*Client)

// WithWorkerID sets the worker identity stored as the lease owner (1–200
// visible ASCII characters). The default is "<hostname>-<pid>".
func WithWorkerID(id string) Option { return func(c *Client) { c.workerID = id } }

// WithLeaseSeconds sets the lease asked for on each claim: how long fn may
// run before the journal considers the worker gone and the outcome unknown.
// 0 (the default) takes the action policy's lease_seconds, which is also
// the most a caller may ask for.
func WithLeaseSeconds(n int) Option { return func(c *Client) { c.leaseSeconds = int32(n) } }

// WithHeartbeat turns the heartbeats of Execute on (the default) or off.
// With them, a call to the provider that outlasts a third of the lease
// extends it (ExtendLease) up to the policy's max_attempt_seconds; without
// them, Execute gives up at the end of the first lease. Either way fn's
// context is canceled when the lease can no longer be kept.
func WithHeartbeat(on bool) Option { return func(c *Client) { c.heartbeat = on } }

// WithToken sends "Authorization: Bearer <token>" with every call, for a
// journal that runs with authentication (--auth-file). The token decides
// the tenant and the roles; keep it out of logs and source code.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// New returns a Client that calls the JournalService over cc (a
// *grpc.ClientConn with the transport security of your choice).
func New(cc grpc.ClientConnInterface, opts ...Option) *Client {
	c := &Client{workerID: defaultWorkerID(), heartbeat: true}
	for _, o := range opts {
		o(c)
	}
	if c.token != "" {
		cc = BearerConn(cc, c.token)
	}
	// A client span per call with its W3C trace context in the metadata,
	// when the program set up OpenTelemetry (see Execute).
	cc = tracing.WrapConn(cc)
	c.rpc = opjournalv1.NewJournalServiceClient(cc)
	return c
}

// BearerConn wraps cc so that every unary call carries the bearer token,
// for code that uses the generated JournalServiceClient directly.
func BearerConn(cc grpc.ClientConnInterface, token string) grpc.ClientConnInterface {
	return bearerConn{ClientConnInterface: cc, header: "Bearer " + token}
}

type bearerConn struct {
	grpc.ClientConnInterface
	header string
}

func (b bearerConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return b.ClientConnInterface.Invoke(metadata.AppendToOutgoingContext(ctx, "authorization", b.header), method, args, reply, opts...)
}

// Dial connects to the journal's gRPC address (host:port) WITHOUT transport
// security, for local use and tests; use New with your own connection
// otherwise. The connection is made lazily: an unreachable journal shows up
// as an error of the first call. Close releases it.
//
// Its messages are encoded and decoded by the code generated for them
// (vtprotobuf) rather than by protobuf-go's reflection, with the same
// checks (UTF-8 strings, bounded nesting); a connection passed to New uses
// whatever codec it was made with.
func Dial(target string, opts ...Option) (*Client, error) {
	conn, err := grpc.NewClient(target, append(WithTLSHint(target, false, sdkFix),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		protocodec.DialOption())...)
	if err != nil {
		return nil, fmt.Errorf("opjournal: dial %s: %w", target, err)
	}
	c := New(conn, opts...)
	c.conn = conn
	return c, nil
}

// Close closes the connection opened by Dial; for a Client made by New it
// does nothing (the caller owns the connection).
func (c *Client) Close() error {
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// Lookup returns the journal's record of an operation. An unknown key is an
// error matching errors.Is(err, opjournal.ErrNotFound).
func (c *Client) Lookup(ctx context.Context, key string) (*opjournalv1.Operation, error) {
	resp, err := c.rpc.Lookup(ctx, &opjournalv1.LookupRequest{OperationKey: key})
	if err != nil {
		return nil, journalError(ctx, "lookup", key, err)
	}
	return resp.GetOperation(), nil
}

// WhoAmI returns who the journal takes the caller to be: the principal
// its credential authenticates (Authenticated is false when the journal
// runs without authentication).
func (c *Client) WhoAmI(ctx context.Context) (*opjournalv1.WhoAmIResponse, error) {
	resp, err := c.rpc.WhoAmI(ctx, &opjournalv1.WhoAmIRequest{})
	if err != nil {
		return nil, journalError(ctx, "whoami", "", err)
	}
	return resp, nil
}

// Events returns an operation's whole history, oldest first, reading it
// page by page (ListEvents). The sequence ends after the last event or
// after yielding an error.
func (c *Client) Events(ctx context.Context, key string) iter.Seq2[*opjournalv1.Event, error] {
	return func(yield func(*opjournalv1.Event, error) bool) {
		token := ""
		for {
			resp, err := c.rpc.ListEvents(ctx, &opjournalv1.ListEventsRequest{OperationKey: key, PageSize: opjournal.MaxPageSize, PageToken: token})
			if err != nil {
				yield(nil, journalError(ctx, "list events", key, err))
				return
			}
			for _, e := range resp.GetEvents() {
				if !yield(e, nil) {
					return
				}
			}
			if token = resp.GetNextPageToken(); token == "" {
				return
			}
		}
	}
}

// Wait polls Lookup every interval until the operation is settled:
// succeeded or failed_final, or flagged needs_review (a person must decide,
// so polling on is pointless). Use it after VerificationRequired or
// InProgressElsewhere to learn the outcome without acting. An unreachable
// journal is polled again; any other error ends the wait. When ctx ends
// first, Wait returns the last record read (nil if none) and ctx's error.
func (c *Client) Wait(ctx context.Context, key string, interval time.Duration) (*opjournalv1.Operation, error) {
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var last *opjournalv1.Operation
	for {
		op, err := c.Lookup(ctx, key)
		switch {
		case err == nil:
			last = op
			if settled(op) {
				return op, nil
			}
		case ctx.Err() != nil:
		case opjournal.ErrorCode(err) != opjournal.CodeUnavailable:
			return last, err
		}
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("opjournal: wait %q: %w", key, ctx.Err())
		case <-t.C:
		}
	}
}

func settled(op *opjournalv1.Operation) bool {
	switch op.GetStatus() {
	case opjournalv1.Status_STATUS_SUCCEEDED, opjournalv1.Status_STATUS_FAILED_FINAL:
		return true
	}
	return op.GetNeedsReview()
}

// defaultWorkerID is "<hostname>-<pid>", reduced to what the journal
// accepts (visible ASCII, ≤ 200 characters).
func defaultWorkerID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "worker"
	}
	id := strings.Map(func(r rune) rune {
		if r < 0x21 || r > 0x7e {
			return '_'
		}
		return r
	}, fmt.Sprintf("%s-%d", host, os.Getpid()))
	if len(id) > 200 {
		id = id[len(id)-200:]
	}
	return id
}
