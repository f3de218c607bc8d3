// Package cli holds what opjournal's commands share on the command line:
// flags that fall back to OPJOURNAL_* environment variables, and the
// structured logger they all use.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
)

// EnvName returns the environment variable of a flag: --database-url is
// OPJOURNAL_DATABASE_URL.
func EnvName(flagName string) string {
	return "OPJOURNAL_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// ApplyEnv sets every flag of fs whose OPJOURNAL_* variable is set, as its
// new default (so a flag on the command line still wins). It returns an
// error naming each variable whose value the flag refuses.
func ApplyEnv(fs *flag.FlagSet) error {
	var bad []string
	fs.VisitAll(func(f *flag.Flag) {
		env := EnvName(f.Name)
		if v, ok := os.LookupEnv(env); ok {
			if err := f.Value.Set(v); err != nil {
				bad = append(bad, fmt.Sprintf("%s=%q: %v", env, v, err))
			}
			f.DefValue = v
		}
	})
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

// Parse applies the environment (ApplyEnv), then args, and refuses
// positional arguments.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := ApplyEnv(fs); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	return nil
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
