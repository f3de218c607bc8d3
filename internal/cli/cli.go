// Package cli holds what opjournal's commands share on the command line:
// the root command every binary is built on (NewRoot, Execute, Exit: one
// convention for help, version, completion, exit statuses and -o), flags
// that fall back to OPJOURNAL_* environment variables (MirrorEnv), the
// journal's connection flags, and the structured logger they all use.
package cli

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/internal/protocodec"
)

// EnvName returns the environment variable of a flag: --database-url is
// OPJOURNAL_DATABASE_URL.
func EnvName(flagName string) string {
	return "OPJOURNAL_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// NewLogger returns a slog logger writing to w at level ("debug", "info",
// "warn", "error") in format ("json" or "text"), or an error naming the
// bad flag.
func NewLogger(level, format string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: %q is not json or text", format)
}

// JournalFlags are the flags of a command that calls the journal.
type JournalFlags struct {
	Addr      string
	TokenFile string
	TLSCA     string
}

// Register adds --journal-addr, --token-file and --tls-ca to fs.
func (j *JournalFlags) Register(fs *pflag.FlagSet) {
	fs.StringVar(&j.Addr, "journal-addr", "127.0.0.1:9090", "the journal's gRPC address")
	fs.StringVar(&j.TokenFile, "token-file", "", "file holding the bearer token (or set OPJOURNAL_TOKEN; never pass a token as a flag)")
	fs.StringVar(&j.TLSCA, "tls-ca", "", "PEM CA (or the server's certificate) to verify a TLS journal; empty: plain gRPC")
}

// Dial connects to the journal as the flags say. It returns the connection
// (to close) and the connection to call through, which adds the bearer
// token (from --token-file, else $OPJOURNAL_TOKEN) to every call.
func (j *JournalFlags) Dial() (*grpc.ClientConn, grpc.ClientConnInterface, error) {
	conn, token, err := j.DialWithoutToken()
	if err != nil {
		return nil, nil, err
	}
	var cc grpc.ClientConnInterface = conn
	if token != "" {
		cc = client.BearerConn(conn, token)
	}
	return conn, cc, nil
}

// DialWithoutToken connects to the journal as the flags say, and returns
// the connection without a token of its own, and the token (from
// --token-file, else $OPJOURNAL_TOKEN; "" for none): for a front door
// whose calls carry each caller's credential.
func (j *JournalFlags) DialWithoutToken() (*grpc.ClientConn, string, error) {
	creds := insecure.NewCredentials()
	if j.TLSCA != "" {
		pem, err := os.ReadFile(j.TLSCA)
		if err != nil {
			return nil, "", fmt.Errorf("--tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, "", fmt.Errorf("--tls-ca %s: no PEM certificate in it", j.TLSCA)
		}
		creds = credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	}
	token := os.Getenv("OPJOURNAL_TOKEN")
	if j.TokenFile != "" {
		b, err := os.ReadFile(j.TokenFile)
		if err != nil {
			return nil, "", fmt.Errorf("--token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	opts := client.WithTLSHint(j.Addr, j.TLSCA != "", client.TLSFix{
		Give: "give --tls-ca (or OPJOURNAL_TLS_CA)",
		Drop: "drop --tls-ca (and OPJOURNAL_TLS_CA)",
	})
	// The generated codec, as client.Dial's: the gateway's, reconciler's and
	// CLI's calls decode and encode without reflection.
	conn, err := grpc.NewClient(j.Addr, append(opts, grpc.WithTransportCredentials(creds), protocodec.DialOption())...)
	if err != nil {
		return nil, "", fmt.Errorf("journal %s: %w", j.Addr, err)
	}
	return conn, token, nil
}

// usageError is a problem with a command's flags, arguments or
// configuration; hint, when set, says where to read the usage.
type usageError struct {
	error
	hint string
}

func (e usageError) Unwrap() error { return e.error }

// Usage marks err as a usage error: Exit ends the command with status 2.
func Usage(err error) error { return usageError{error: err} }

// IsUsage reports whether err is a usage error (exit status 2).
func IsUsage(err error) bool {
	var ue usageError
	return errors.As(err, &ue)
}

// Exit ends a command's main with err (from Execute): status 0 for none,
// 2 for a usage error (Usage), 1 for anything else. The error is printed
// on stderr after the command's name, and a usage error with a pointer to
// --help.
func Exit(name string, err error) {
	os.Exit(report(os.Stderr, name, err))
}

// report writes err to w as Exit does and returns the exit status.
func report(w io.Writer, name string, err error) int {
	if err == nil {
		return 0
	}
	fmt.Fprintln(w, name+":", err)
	var ue usageError
	if !errors.As(err, &ue) {
		return 1
	}
	if ue.hint != "" {
		fmt.Fprintln(w, ue.hint)
	}
	return 2
}
