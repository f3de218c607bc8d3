// Command openapi3 writes the OpenAPI 3.1 document of JournalService's REST
// mirror (proto/openapi/opjournal.openapi.json, served at /openapi.json) from
// the Swagger 2.0 document protoc-gen-openapiv2 makes of proto/ and the
// HTTP mapping (proto/opjournal/v1/journal_http.yaml). `make generate` runs
// it; CI checks that the output is current.
//
//	go run ./internal/cmd/openapi3 -o proto/openapi/opjournal.openapi.json proto/openapi/opjournal.swagger.json
//
// Besides moving Swagger 2.0's constructs to their 3.1 places (definitions →
// components/schemas, body parameters → requestBody, query parameters →
// schema + style), it states what the Swagger document cannot, from the
// sources of truth themselves:
//
//   - the real error body {"error": {"code", "message", "field", "details"}}
//     (server/http.go writeError) instead of google.rpc.Status, with ErrorCode
//     the enum of opjournal's error codes and, on every route, one response
//     per HTTP status of the table in server/errors.go (server.HTTPStatuses);
//   - the gateway's JSON (protojson with EmitUnpopulated): from the proto
//     descriptors, a singular message field outside a oneof (a Timestamp, a
//     Struct, a message) may be null, and every field of a schema that only
//     responses use is always present (required), except oneof members
//     (proto3 optional fields included);
//   - a map field in the query string (refs[string]) as a deepObject
//     parameter (refs[order_id]=817).
//
// Anything in the input it does not know fails the run rather than being
// copied unchecked. The output is deterministic (sorted keys).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/opjournal/opjournal/proto/opjournal/v1" // registers the descriptors
	"github.com/opjournal/opjournal/server"
)

func main() {
	out := flag.String("o", "", "the OpenAPI 3.1 document to write")
	flag.Parse()
	if *out == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: openapi3 -o OUT.json IN.swagger.json")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *out); err != nil {
		fmt.Fprintln(os.Stderr, "openapi3:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	src, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	doc, err := convert(src, server.HTTPStatuses(), protoregistry.GlobalFiles)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	if old, err := os.ReadFile(out); err == nil && bytes.Equal(old, doc) {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), ".openapi3-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(doc); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), out)
}
