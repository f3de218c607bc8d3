package main

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/opjournal/opjournal/server"
)

// A Swagger document of the shape protoc-gen-openapiv2 writes
// (openapi_naming_strategy=fqn, json_names_for_fields=false).
const swaggerIn = `{
  "swagger": "2.0",
  "info": {"title": "opjournal/v1/journal.proto", "version": "version not set"},
  "tags": [{"name": "JournalService"}],
  "consumes": ["application/json"],
  "produces": ["application/json"],
  "paths": {
    "/v1/operations:claim": {"post": {
      "operationId": "JournalService_Claim",
      "responses": {
        "200": {"description": "A successful response.", "schema": {"$ref": "#/definitions/opjournal.v1.ClaimResponse"}},
        "default": {"description": "An unexpected error response.", "schema": {"$ref": "#/definitions/google.rpc.Status"}}
      },
      "parameters": [{"name": "body", "in": "body", "required": true, "schema": {"$ref": "#/definitions/opjournal.v1.ClaimRequest"}}],
      "tags": ["JournalService"]
    }},
    "/v1/operations": {"get": {
      "operationId": "JournalService_ListOperations",
      "responses": {
        "200": {"description": "A successful response.", "schema": {"$ref": "#/definitions/opjournal.v1.ListOperationsResponse"}}
      },
      "parameters": [
        {"name": "statuses", "in": "query", "required": false, "type": "array", "items": {"type": "string", "enum": ["STATUS_PENDING"]}, "collectionFormat": "multi"},
        {"name": "refs[string]", "in": "query", "required": false, "type": "string"},
        {"name": "page_size", "in": "query", "required": false, "type": "integer", "format": "int32"}
      ]
    }}
  },
  "definitions": {
    "google.rpc.Status": {"type": "object", "properties": {"code": {"type": "integer"}}},
    "opjournal.v1.Status": {"type": "string", "enum": ["STATUS_UNSPECIFIED", "STATUS_PENDING"], "default": "STATUS_UNSPECIFIED"},
    "opjournal.v1.ClaimRequest": {"type": "object", "properties": {"operation_key": {"type": "string"}, "worker_id": {"type": "string"}}},
    "opjournal.v1.ClaimResponse": {"type": "object", "properties": {
      "operation": {"$ref": "#/definitions/opjournal.v1.Operation", "description": "The record."},
      "claimed": {"type": "boolean"},
      "lease_until": {"type": "string", "format": "date-time"}
    }},
    "opjournal.v1.ListOperationsResponse": {"type": "object", "properties": {
      "operations": {"type": "array", "items": {"type": "object", "$ref": "#/definitions/opjournal.v1.Operation"}},
      "next_page_token": {"type": "string"}
    }},
    "opjournal.v1.Operation": {"type": "object", "properties": {
      "operation_key": {"type": "string"},
      "status": {"$ref": "#/definitions/opjournal.v1.Status"},
      "result": {"type": "object"},
      "refs": {"type": "object", "additionalProperties": {"type": "string"}}
    }}
  }
}`

func convertTest(t *testing.T, src string) map[string]any {
	t.Helper()
	out, err := convert([]byte(src), server.HTTPStatuses(), protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	again, err := convert([]byte(src), server.HTTPStatuses(), protoregistry.GlobalFiles)
	if err != nil || !bytes.Equal(out, again) {
		t.Fatalf("two runs differ (err %v)", err)
	}
	var doc map[string]any
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// at walks doc along a |-separated path.
func at(t *testing.T, doc any, path string) any {
	t.Helper()
	v := doc
	for _, k := range strings.Split(path, "|") {
		switch x := v.(type) {
		case map[string]any:
			v = x[k]
		case []any:
			i, _ := strconv.Atoi(k)
			if i >= len(x) {
				t.Fatalf("%s: index %d out of range", path, i)
			}
			v = x[i]
		default:
			t.Fatalf("%s: no %q in %T", path, k, v)
		}
	}
	return v
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestConvert(t *testing.T) {
	doc := convertTest(t, swaggerIn)
	if doc["openapi"] != "3.1.0" {
		t.Fatalf("openapi %v", doc["openapi"])
	}
	schemas := at(t, doc, "components|schemas").(map[string]any)
	if _, ok := schemas["google.rpc.Status"]; ok {
		t.Error("google.rpc.Status is still described")
	}

	// Errors: one response per status of server/errors.go, all the Error body.
	claim := at(t, doc, "paths|/v1/operations:claim|post")
	for code, st := range server.HTTPStatuses() {
		ref := at(t, claim, "responses|"+strconv.Itoa(st)+"|$ref")
		if ref == nil {
			t.Errorf("HTTP %d (%s) is not documented", st, code)
			continue
		}
		name := strings.TrimPrefix(ref.(string), "#/components/responses/")
		resp := at(t, doc, "components|responses|"+name).(map[string]any)
		schema := resp["content"].(map[string]any)["application/json"].(map[string]any)["schema"]
		if jsonOf(schema) != `{"$ref":"#/components/schemas/Error"}` {
			t.Errorf("%s: schema %s", name, jsonOf(schema))
		}
		if !strings.Contains(resp["description"].(string), string(code)) {
			t.Errorf("%s: description %q does not name %s", name, resp["description"], code)
		}
	}
	if len(at(t, schemas, "ErrorCode|enum").([]any)) != len(server.HTTPStatuses()) {
		t.Errorf("ErrorCode enum %v", at(t, schemas, "ErrorCode|enum"))
	}
	if got := jsonOf(at(t, schemas, "Error|properties|error|required")); got != `["code","message"]` {
		t.Errorf("Error.error required %s", got)
	}

	// The body parameter is the request body.
	if got := jsonOf(at(t, claim, "requestBody")); got != `{"content":{"application/json":{"schema":{"$ref":"#/components/schemas/ClaimRequest"}}},"required":true}` {
		t.Errorf("requestBody %s", got)
	}
	// Query parameters: arrays exploded, a map as a deepObject.
	list := at(t, doc, "paths|/v1/operations|get")
	if got := jsonOf(at(t, list, "parameters|0")); got != `{"explode":true,"in":"query","name":"statuses","schema":{"items":{"enum":["STATUS_PENDING"],"type":"string"},"type":"array"},"style":"form"}` {
		t.Errorf("statuses %s", got)
	}
	if got := jsonOf(at(t, list, "parameters|1")); got != `{"explode":true,"in":"query","name":"refs","schema":{"additionalProperties":{"type":"string"},"type":"object"},"style":"deepObject"}` {
		t.Errorf("refs %s", got)
	}

	// protojson with EmitUnpopulated: unset messages are null, response
	// fields always present; request fields optional.
	if got := jsonOf(at(t, schemas, "ClaimResponse|properties|operation")); got != `{"anyOf":[{"$ref":"#/components/schemas/Operation"},{"type":"null"}],"description":"The record."}` {
		t.Errorf("ClaimResponse.operation %s", got)
	}
	if got := jsonOf(at(t, schemas, "ClaimResponse|properties|lease_until|type")); got != `["string","null"]` {
		t.Errorf("ClaimResponse.lease_until type %s", got)
	}
	if got := jsonOf(at(t, schemas, "Operation|properties|result")); got != `{"additionalProperties":true,"type":["object","null"]}` {
		t.Errorf("Operation.result %s", got)
	}
	if got := jsonOf(at(t, schemas, "Operation|properties|refs")); got != `{"additionalProperties":{"type":"string"},"type":"object"}` {
		t.Errorf("Operation.refs (a map is never null) %s", got)
	}
	if got := jsonOf(at(t, schemas, "ClaimResponse|required")); got != `["claimed","lease_until","operation"]` {
		t.Errorf("ClaimResponse required %s", got)
	}
	if got := jsonOf(at(t, schemas, "ListOperationsResponse|properties|operations|items")); got != `{"$ref":"#/components/schemas/Operation"}` {
		t.Errorf("items %s", got)
	}
	if r := at(t, schemas, "ClaimRequest|required"); r != nil {
		t.Errorf("ClaimRequest required %v: proto3 request fields are optional", r)
	}
}

// The converter refuses what it does not know rather than copying it.
func TestConvertRefusesTheUnknown(t *testing.T) {
	for name, edit := range map[string][2]string{
		"header parameter": {`"in": "query", "required": false, "type": "integer"`, `"in": "header", "required": false, "type": "integer"`},
		"schema member":    {`"claimed": {"type": "boolean"}`, `"claimed": {"type": "boolean", "discriminator": "x"}`},
		"document member":  {`"consumes"`, `"securityDefinitions": {}, "consumes"`},
		"field name":       {`"worker_id": {"type": "string"}`, `"workerId": {"type": "string"}`},
		"response":         {`"default": {"description"`, `"404": {"description"`},
	} {
		src := strings.Replace(swaggerIn, edit[0], edit[1], 1)
		if src == swaggerIn {
			t.Fatalf("%s: edit does not apply", name)
		}
		if _, err := convert([]byte(src), server.HTTPStatuses(), protoregistry.GlobalFiles); err == nil {
			t.Errorf("%s: converted without an error", name)
		}
	}
}
