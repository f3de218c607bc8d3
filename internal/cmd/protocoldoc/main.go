// Command protocoldoc writes the protocol table (protocol.ProtocolMarkdown)
// into a Markdown page between its markers (docs/protocol.md, the
// manual's page on the protocol), so the page shows the table the code
// applies: `make generate` runs it, and a test of internal/protocol fails
// when docs/protocol.md differs from it.
//
//	go run ./internal/cmd/protocoldoc docs/protocol.md
package main

import (
	"fmt"
	"os"

	"github.com/opjournal/opjournal/internal/protocol"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: protocoldoc docs/protocol.md (the page with the protocol table's markers)")
		os.Exit(2)
	}
	b, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "protocoldoc:", err)
		os.Exit(1)
	}
	out, err := protocol.SpliceProtocol(string(b))
	if err != nil {
		fmt.Fprintln(os.Stderr, "protocoldoc:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(os.Args[1], []byte(out), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "protocoldoc:", err)
		os.Exit(1)
	}
}
