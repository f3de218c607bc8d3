// Package openapi embeds the OpenAPI 3.1 document of JournalService's REST
// mirror, opjournal.openapi.json: `make generate` has protoc-gen-openapiv2
// write a Swagger 2.0 document from proto/ and the HTTP mapping, which
// internal/cmd/openapi3 converts to 3.1 with the real error body and the
// statuses of server/errors.go. The HTTP listener serves it at
// /openapi.json. This file is hand-written; the JSON beside it is generated.
package openapi

import _ "embed"

// JSON is the generated OpenAPI 3.1 document of JournalService's REST mapping.
//
//go:embed opjournal.openapi.json
var JSON []byte
