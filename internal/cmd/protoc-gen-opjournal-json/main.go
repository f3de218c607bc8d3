// Command protoc-gen-opjournal-json is a protoc (buf) plugin that writes,
// beside each generated Go file, AppendProtoJSON methods that encode its
// messages as protojson does for the REST mirror (package
// internal/restjsongen). buf.gen.yaml runs it with `go run`; it reads the
// request on standard input and writes the files to standard output.
package main

import (
	"google.golang.org/protobuf/compiler/protogen"

	"github.com/opjournal/opjournal/internal/restjsongen"
)

func main() {
	protogen.Options{}.Run(restjsongen.Generate)
}
