// Package testserver starts a real journal in-process for tests: a SQLite
// file under t.TempDir(), the journal service, and the gRPC and HTTP
// listeners on free loopback ports. It is the real server (same code as
// `opjournal serve`), not a mock; only the process boundary is skipped.
package testserver

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/opjournal/opjournal/internal/protocodec"
	"github.com/opjournal/opjournal/journal"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/server"
	"github.com/opjournal/opjournal/server/auth"
	"github.com/opjournal/opjournal/store/sqlite"
)

// Journal is a running journal.
type Journal struct {
	GRPCAddr string
	HTTPURL  string
	// Client is connected to GRPCAddr.
	Client pb.JournalServiceClient
	// Conn is the client's connection.
	Conn *grpc.ClientConn
}

// Option configures Start.
type Option func(*options)

type options struct {
	clock      func() time.Time
	auth       *auth.Authenticator
	adminToken string
	journal    []journal.Option
}

// WithJournalOptions configures the journal service (journal.New's
// options): a replay cache of another size, say.
func WithJournalOptions(opts ...journal.Option) Option {
	return func(o *options) { o.journal = append(o.journal, opts...) }
}

// WithAuth makes the journal authenticate callers with a (as --auth-file
// does); the Journal's Client then calls with adminToken, an admin's token
// of a, while Conn carries no token, for callers that bring their own.
func WithAuth(a *auth.Authenticator, adminToken string) Option {
	return func(o *options) { o.auth, o.adminToken = a, adminToken }
}

// WithClock makes the journal's database read the time from now instead of
// its own clock (store.Clock): the test moves time by hand.
func WithClock(now func() time.Time) Option { return func(o *options) { o.clock = now } }

// Start runs a journal with pol (nil: the shipped policy) until the test
// ends. It fails the test if the journal cannot start.
func Start(t testing.TB, pol *policy.Policy, opts ...Option) *Journal {
	t.Helper()
	if pol == nil {
		pol = policy.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		cancel()
		t.Fatalf("testserver: %v", err)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.clock != nil {
		st.SetClock(o.clock)
	}
	srv := server.New(journal.New(st, pol, journal.Limits{}, o.journal...), server.Config{
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Auth: o.auth,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	ready := make(chan server.Addrs, 1)
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, func(a server.Addrs) { ready <- a }) }()
	var addrs server.Addrs
	select {
	case addrs = <-ready:
	case err := <-done:
		cancel()
		st.Close()
		t.Fatalf("testserver: %v", err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("testserver: not listening after 10 s")
	}
	// The SDK's codec (client.Dial's), so benchmarks measure both ends as
	// an agent's program runs them.
	conn, err := grpc.NewClient(addrs.GRPC.String(), grpc.WithTransportCredentials(insecure.NewCredentials()), protocodec.DialOption())
	if err != nil {
		cancel()
		t.Fatalf("testserver: %v", err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		<-done
		st.Close()
	})
	var cc grpc.ClientConnInterface = conn
	if o.adminToken != "" {
		cc = bearer{conn, "Bearer " + o.adminToken}
	}
	return &Journal{GRPCAddr: addrs.GRPC.String(), HTTPURL: "http://" + addrs.HTTP.String(), Client: pb.NewJournalServiceClient(cc), Conn: conn}
}

// bearer adds a token to every unary call (the client package's BearerConn,
// which this package cannot import without a cycle in its tests).
type bearer struct {
	*grpc.ClientConn
	header string
}

func (b bearer) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return b.ClientConn.Invoke(metadata.AppendToOutgoingContext(ctx, "authorization", b.header), method, args, reply, opts...)
}
