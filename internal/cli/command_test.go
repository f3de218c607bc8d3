package cli_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/opjournal/opjournal/internal/cli"
)

// tree is a root with a mirrored persistent flag and a subcommand with a
// mirrored flag, a flag that is not, and a hook that reads the persistent
// flag.
type tree struct {
	root               *cobra.Command
	addr, name, secret string
	wait               time.Duration
	seenInHook         string
	runErr             error
	ran                bool
}

func newTree() *tree {
	t := &tree{}
	root := &cobra.Command{Use: "prog", Example: "  prog sub"}
	root.PersistentFlags().StringVar(&t.addr, "journal-addr", "127.0.0.1:9090", "")
	cli.MirrorEnv(root.PersistentFlags())
	root.PersistentPreRunE = func(*cobra.Command, []string) error { t.seenInHook = t.addr; return nil }
	sub := &cobra.Command{Use: "sub", Args: cli.NoArgs, RunE: func(*cobra.Command, []string) error { t.ran = true; return t.runErr }}
	sub.Flags().StringVar(&t.name, "name", "", "")
	sub.Flags().DurationVar(&t.wait, "wait", time.Second, "")
	cli.MirrorEnv(sub.Flags())
	sub.Flags().StringVar(&t.secret, "secret", "", "")
	root.AddCommand(sub)
	var out bytes.Buffer
	t.root = cli.NewRoot(root, "v1.2.3", &out, &out)
	return t
}

func TestExecuteMirrorsTheEnvironmentAndTheCommandLineWins(t *testing.T) {
	t.Setenv("OPJOURNAL_JOURNAL_ADDR", "journal:9090")
	t.Setenv("OPJOURNAL_NAME", "from-env")
	t.Setenv("OPJOURNAL_WAIT", "5s")
	t.Setenv("OPJOURNAL_SECRET", "not mirrored")
	tr := newTree()
	if err := cli.Execute(context.Background(), tr.root, []string{"sub", "--name", "from-flag"}); err != nil {
		t.Fatal(err)
	}
	if tr.addr != "journal:9090" || tr.seenInHook != "journal:9090" || tr.name != "from-flag" || tr.wait != 5*time.Second || tr.secret != "" {
		t.Fatalf("addr %q (hook saw %q), name %q, wait %v, secret %q", tr.addr, tr.seenInHook, tr.name, tr.wait, tr.secret)
	}
	// -name is --name, as Go's flag package read it; flags anywhere.
	tr = newTree()
	if err := cli.Execute(context.Background(), tr.root, []string{"-journal-addr", "x:1", "sub", "-wait=2s"}); err != nil || tr.addr != "x:1" || tr.wait != 2*time.Second {
		t.Fatalf("%v: addr %q wait %v", err, tr.addr, tr.wait)
	}
}

func TestExecuteSortsUsageErrorsFromTheCommandsErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   string
		args  []string
		usage bool
		says  string
	}{
		{"unknown flag", "", []string{"sub", "--nope"}, true, "unknown flag: --nope"},
		{"bad value", "", []string{"sub", "--wait", "soon"}, true, `"--wait"`},
		{"bad variable", "OPJOURNAL_WAIT=soon", []string{"sub"}, true, `OPJOURNAL_WAIT="soon"`},
		{"positional", "", []string{"sub", "extra"}, true, "unexpected arguments: [extra]"},
		{"unknown command", "", []string{"sbu"}, true, `unknown command "sbu" for "prog"`},
		{"the command's error", "", []string{"sub"}, false, "the provider is down"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if k, v, ok := strings.Cut(tc.env, "="); ok {
				t.Setenv(k, v)
			}
			tr := newTree()
			tr.runErr = errors.New("the provider is down")
			err := cli.Execute(context.Background(), tr.root, tc.args)
			if err == nil || cli.IsUsage(err) != tc.usage || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err %v (usage %v), want usage %v saying %q", err, cli.IsUsage(err), tc.usage, tc.says)
			}
			if tc.usage && tr.ran {
				t.Fatal("a refused command line ran the command")
			}
			if !tc.usage && err != tr.runErr {
				t.Fatalf("the command's error came back as %#v", err)
			}
		})
	}
}

func TestVersionAndHelp(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		tr := newTree()
		var out bytes.Buffer
		tr.root.SetOut(&out)
		if err := cli.Execute(context.Background(), tr.root, args); err != nil || out.String() != "v1.2.3\n" {
			t.Fatalf("%v: %v %q", args, err, out.String())
		}
	}
	tr := newTree()
	var out bytes.Buffer
	tr.root.SetOut(&out)
	if err := cli.Execute(context.Background(), tr.root, []string{"sub", "--help"}); err != nil || !strings.Contains(out.String(), "[$OPJOURNAL_NAME]") || strings.Contains(out.String(), "OPJOURNAL_SECRET") {
		t.Fatalf("sub --help: %v\n%s", err, out.String())
	}
}
