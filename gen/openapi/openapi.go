// Package openapi embeds the OpenAPI (Swagger 2.0) document that
// protoc-gen-openapiv2 generates from proto/ (`make generate`). The HTTP
// listener serves it at /openapi.json. This file is hand-written; the JSON
// beside it is generated.
package openapi

import _ "embed"

// JSON is the generated OpenAPI document of JournalService's REST mapping.
//
//go:embed opjournal.swagger.json
var JSON []byte
