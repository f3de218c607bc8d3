package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/opjournal/opjournal"
)

// protoPackage prefixes the definition names (openapi_naming_strategy=fqn)
// that become short component names (opjournal.v1.Operation → Operation).
const protoPackage = "opjournal.v1."

const jsonType = "application/json"

// swagger is the part of Swagger 2.0 that protoc-gen-openapiv2 writes for
// this service. Decoding rejects unknown members, so a construct the
// converter does not handle fails the run.
type swagger struct {
	Swagger     string                                 `json:"swagger"`
	Info        map[string]any                         `json:"info"`
	Tags        []map[string]any                       `json:"tags"`
	Consumes    []string                               `json:"consumes"`
	Produces    []string                               `json:"produces"`
	Paths       map[string]map[string]swaggerOperation `json:"paths"`
	Definitions map[string]map[string]any              `json:"definitions"`
}

type swaggerOperation struct {
	Summary     string                     `json:"summary"`
	Description string                     `json:"description"`
	OperationID string                     `json:"operationId"`
	Responses   map[string]swaggerResponse `json:"responses"`
	Parameters  []swaggerParameter         `json:"parameters"`
	Tags        []string                   `json:"tags"`
	Deprecated  bool                       `json:"deprecated"`
}

type swaggerResponse struct {
	Description string         `json:"description"`
	Schema      map[string]any `json:"schema"`
}

type swaggerParameter struct {
	Name             string         `json:"name"`
	Description      string         `json:"description"`
	In               string         `json:"in"`
	Required         bool           `json:"required"`
	Type             string         `json:"type"`
	Format           string         `json:"format"`
	Items            map[string]any `json:"items"`
	Enum             []any          `json:"enum"`
	Default          any            `json:"default"`
	CollectionFormat string         `json:"collectionFormat"`
	Schema           map[string]any `json:"schema"`
}

// The OpenAPI 3.1 document, in a readable member order.
type document struct {
	OpenAPI    string                           `json:"openapi"`
	Info       map[string]any                   `json:"info"`
	Servers    []map[string]any                 `json:"servers"`
	Tags       []map[string]any                 `json:"tags,omitempty"`
	Security   []map[string][]string            `json:"security"`
	Paths      map[string]map[string]*operation `json:"paths"`
	Components components                       `json:"components"`
}

type operation struct {
	Summary     string         `json:"summary,omitempty"`
	Description string         `json:"description,omitempty"`
	OperationID string         `json:"operationId"`
	Tags        []string       `json:"tags,omitempty"`
	Deprecated  bool           `json:"deprecated,omitempty"`
	Parameters  []parameter    `json:"parameters,omitempty"`
	RequestBody *requestBody   `json:"requestBody,omitempty"`
	Responses   map[string]any `json:"responses"`
}

type parameter struct {
	Name        string         `json:"name"`
	In          string         `json:"in"`
	Description string         `json:"description,omitempty"`
	Required    bool           `json:"required,omitempty"`
	Style       string         `json:"style,omitempty"`
	Explode     *bool          `json:"explode,omitempty"`
	Schema      map[string]any `json:"schema"`
}

type requestBody struct {
	Description string                    `json:"description,omitempty"`
	Required    bool                      `json:"required,omitempty"`
	Content     map[string]map[string]any `json:"content"`
}

type components struct {
	Schemas         map[string]map[string]any `json:"schemas"`
	Responses       map[string]any            `json:"responses"`
	SecuritySchemes map[string]any            `json:"securitySchemes"`
}

// convert turns the Swagger 2.0 document src into OpenAPI 3.1. statuses is
// the HTTP status of every opjournal error code (server.HTTPStatuses);
// files resolves the definitions' proto messages.
func convert(src []byte, statuses map[opjournal.Code]int, files interface {
	FindDescriptorByName(protoreflect.FullName) (protoreflect.Descriptor, error)
}) ([]byte, error) {
	var sw swagger
	dec := json.NewDecoder(bytes.NewReader(src))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&sw); err != nil {
		return nil, fmt.Errorf("not the Swagger document expected: %w", err)
	}
	if sw.Swagger != "2.0" {
		return nil, fmt.Errorf("swagger %q, want 2.0", sw.Swagger)
	}
	for _, list := range [][]string{sw.Consumes, sw.Produces} {
		if !slices.Equal(list, []string{jsonType}) {
			return nil, fmt.Errorf("consumes/produces %v, want [%s]", list, jsonType)
		}
	}
	if len(statuses) == 0 {
		return nil, fmt.Errorf("no error codes")
	}

	names, err := componentNames(sw.Definitions)
	if err != nil {
		return nil, err
	}
	c := &converter{names: names}

	doc := document{
		OpenAPI: "3.1.0",
		Info: map[string]any{
			"title":   "opjournal",
			"version": "v1",
			"summary": "REST mirror of opjournal.v1.JournalService, the operation journal",
			"description": "Generated from proto/opjournal/v1 and its HTTP mapping (journal_http.yaml); " +
				"`make generate` writes it. Field names are the proto names (snake_case). Responses carry " +
				"every field (protojson with EmitUnpopulated): an unset message field is null, a 64-bit " +
				"integer is a string, an enum is its name. Every error is " +
				"`{\"error\": {\"code\": ErrorCode, \"message\": string, \"field\": string}}` " +
				"(field only when a request field is at fault) with the HTTP status that server/errors.go " +
				"maps the code to.",
			"license": map[string]any{"name": "Apache-2.0", "identifier": "Apache-2.0"},
		},
		// The document is served by the server it describes (GET
		// /openapi.json on the REST listener): a relative URL resolves
		// against wherever it was fetched from, so one document fits every
		// address, port and proxy the server is reached through.
		Servers: []map[string]any{{"url": "/", "description": "the server that serves this document (/openapi.json)"}},
		Tags:    sw.Tags,
		// A token only when the server has --auth-file.
		Security: []map[string][]string{{"bearer": {}}, {}},
		Paths:    map[string]map[string]*operation{},
		Components: components{
			Schemas:   map[string]map[string]any{},
			Responses: map[string]any{},
			SecuritySchemes: map[string]any{"bearer": map[string]any{
				"type": "http", "scheme": "bearer",
				"description": "A token of the server's --auth-file (Authorization: Bearer TOKEN). A server " +
					"without --auth-file needs none. Without a valid token a call is 401 UNAUTHENTICATED; " +
					"with a token whose roles do not allow it, 403 PERMISSION_DENIED.",
			}},
		},
	}

	errRefs, err := errorComponents(&doc.Components, statuses)
	if err != nil {
		return nil, err
	}

	var requestRefs, responseRefs []string
	seenIDs := map[string]bool{}
	for path, item := range sw.Paths {
		for verb, op := range item {
			switch verb {
			case "get", "post", "put", "patch", "delete":
			default:
				return nil, fmt.Errorf("%s: method %q", path, verb)
			}
			if op.OperationID == "" || seenIDs[op.OperationID] {
				return nil, fmt.Errorf("%s %s: operationId %q missing or repeated", verb, path, op.OperationID)
			}
			seenIDs[op.OperationID] = true
			o, reqRefs, respRefs, err := c.operation(op, errRefs)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", verb, path, err)
			}
			requestRefs = append(requestRefs, reqRefs...)
			responseRefs = append(responseRefs, respRefs...)
			if doc.Paths[path] == nil {
				doc.Paths[path] = map[string]*operation{}
			}
			doc.Paths[path][verb] = o
		}
	}

	// Only the definitions the operations use (not google.rpc.Status and
	// its google.protobuf.Any: errors are Error).
	all := map[string]map[string]any{}
	for def, s := range sw.Definitions {
		conv, err := c.schema(s)
		if err != nil {
			return nil, fmt.Errorf("definition %s: %w", def, err)
		}
		all[names[def]] = conv
	}
	fullName := map[string]string{}
	for def, name := range names {
		fullName[name] = def
	}
	requestUse := closure(requestRefs, all)
	responseUse := closure(responseRefs, all)
	for name := range requestUse {
		doc.Components.Schemas[name] = all[name]
	}
	for name := range responseUse {
		doc.Components.Schemas[name] = all[name]
	}
	for name, s := range doc.Components.Schemas {
		if err := protoSemantics(s, fullName[name], files, responseUse[name] && !requestUse[name]); err != nil {
			return nil, fmt.Errorf("schema %s: %w", name, err)
		}
	}
	if _, clash := all["Error"]; clash {
		return nil, fmt.Errorf("a proto definition is named Error, like the error body's schema")
	}
	if _, clash := all["ErrorCode"]; clash {
		return nil, fmt.Errorf("a proto definition is named ErrorCode, like the error codes' schema")
	}
	doc.Components.Schemas["Error"], doc.Components.Schemas["ErrorCode"] = errorSchemas(statuses)

	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// componentNames maps each definition (a proto full name) to its component
// name: without the package prefix, if that stays unique.
func componentNames(defs map[string]map[string]any) (map[string]string, error) {
	names := map[string]string{}
	taken := map[string]string{}
	for def := range defs {
		name := strings.TrimPrefix(def, protoPackage)
		if !regexp.MustCompile(`^[A-Za-z0-9._-]+$`).MatchString(name) {
			return nil, fmt.Errorf("definition %q: not a component name (openapi_naming_strategy=fqn expected)", def)
		}
		if other, ok := taken[name]; ok {
			return nil, fmt.Errorf("definitions %s and %s would both be %s", def, other, name)
		}
		names[def], taken[name] = name, def
	}
	return names, nil
}

type converter struct {
	names map[string]string
}

func (c *converter) ref(ref string) (string, error) {
	def, ok := strings.CutPrefix(ref, "#/definitions/")
	if !ok {
		return "", fmt.Errorf("$ref %q is not a definition", ref)
	}
	name, ok := c.names[def]
	if !ok {
		return "", fmt.Errorf("$ref %q: no such definition", ref)
	}
	return "#/components/schemas/" + name, nil
}

// schemaKeys are the Swagger schema members copied as they are (their
// meaning is the same in JSON Schema 2020-12).
var schemaKeys = map[string]bool{
	"description": true, "title": true, "format": true, "enum": true, "default": true,
	"readOnly": true, "pattern": true, "required": true, "minimum": true, "maximum": true,
	"minLength": true, "maxLength": true, "minItems": true, "maxItems": true, "uniqueItems": true,
}

// schema converts a Swagger schema to a JSON Schema 2020-12 one.
func (c *converter) schema(s map[string]any) (map[string]any, error) {
	out := map[string]any{}
	for k, v := range s {
		switch {
		case k == "$ref":
			r, err := c.ref(v.(string))
			if err != nil {
				return nil, err
			}
			out[k] = r
		case k == "type":
			if _, ref := s["$ref"]; !ref { // openapiv2 writes {"type": "object", "$ref": …} for items
				out[k] = v
			}
		case k == "properties":
			props := map[string]any{}
			for name, p := range v.(map[string]any) {
				conv, err := c.schema(p.(map[string]any))
				if err != nil {
					return nil, fmt.Errorf("%s: %w", name, err)
				}
				props[name] = conv
			}
			out[k] = props
		case k == "items":
			conv, err := c.schema(v.(map[string]any))
			if err != nil {
				return nil, fmt.Errorf("items: %w", err)
			}
			out[k] = conv
		case k == "additionalProperties":
			if m, ok := v.(map[string]any); ok {
				conv, err := c.schema(m)
				if err != nil {
					return nil, fmt.Errorf("additionalProperties: %w", err)
				}
				out[k] = conv
			} else {
				out[k] = v
			}
		case schemaKeys[k] || strings.HasPrefix(k, "x-"):
			out[k] = v
		default:
			return nil, fmt.Errorf("schema member %q is not handled", k)
		}
	}
	// A google.protobuf.Struct is {"type": "object"}: any members. Say so
	// explicitly (the same in JSON Schema), or client generators take it
	// for an empty object.
	_, props := out["properties"]
	_, extra := out["additionalProperties"]
	if out["type"] == "object" && !props && !extra {
		out["additionalProperties"] = true
	}
	return out, nil
}

// mapParam matches openapiv2's name of a map field in the query string.
var mapParam = regexp.MustCompile(`^([a-z0-9_]+)\[string\]$`)

func (c *converter) operation(op swaggerOperation, errRefs map[string]any) (o *operation, reqRefs, respRefs []string, err error) {
	o = &operation{
		Summary: op.Summary, Description: op.Description, OperationID: op.OperationID,
		Tags: op.Tags, Deprecated: op.Deprecated, Responses: map[string]any{},
	}
	for _, p := range op.Parameters {
		switch p.In {
		case "body":
			if o.RequestBody != nil {
				return nil, nil, nil, fmt.Errorf("two body parameters")
			}
			s, err := c.schema(p.Schema)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("body: %w", err)
			}
			reqRefs = append(reqRefs, refsOf(s)...)
			o.RequestBody = &requestBody{Description: p.Description, Required: p.Required,
				Content: map[string]map[string]any{jsonType: {"schema": s}}}
		case "query", "path":
			q := parameter{Name: p.Name, In: p.In, Description: p.Description, Required: p.Required || p.In == "path"}
			s := map[string]any{"type": p.Type}
			if p.Format != "" {
				s["format"] = p.Format
			}
			if p.Enum != nil {
				s["enum"] = p.Enum
			}
			if p.Default != nil {
				s["default"] = p.Default
			}
			if p.Items != nil {
				items, err := c.schema(p.Items)
				if err != nil {
					return nil, nil, nil, fmt.Errorf("parameter %s: %w", p.Name, err)
				}
				s["items"] = items
			}
			switch {
			case p.Type == "array":
				explode := true
				switch p.CollectionFormat {
				case "multi":
				case "", "csv":
					explode = false
				default:
					return nil, nil, nil, fmt.Errorf("parameter %s: collectionFormat %q", p.Name, p.CollectionFormat)
				}
				q.Style, q.Explode = "form", &explode
			case p.CollectionFormat != "":
				return nil, nil, nil, fmt.Errorf("parameter %s: collectionFormat without an array", p.Name)
			}
			if m := mapParam.FindStringSubmatch(p.Name); m != nil {
				if p.Type != "string" || p.In != "query" {
					return nil, nil, nil, fmt.Errorf("map parameter %s of type %s in %s", p.Name, p.Type, p.In)
				}
				explode := true
				q.Name, q.Style, q.Explode = m[1], "deepObject", &explode
				s = map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}}
			}
			q.Schema = s
			reqRefs = append(reqRefs, refsOf(s)...)
			o.Parameters = append(o.Parameters, q)
		default:
			return nil, nil, nil, fmt.Errorf("parameter %s in %q is not handled", p.Name, p.In)
		}
	}
	for status, r := range op.Responses {
		switch status {
		case "200":
			s, err := c.schema(r.Schema)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("response %s: %w", status, err)
			}
			respRefs = append(respRefs, refsOf(s)...)
			o.Responses[status] = map[string]any{"description": "OK", "content": map[string]any{jsonType: map[string]any{"schema": s}}}
		case "default":
			// google.rpc.Status: not what the REST mirror sends; see errRefs.
		default:
			return nil, nil, nil, fmt.Errorf("response %s is not handled", status)
		}
	}
	if o.Responses["200"] == nil {
		return nil, nil, nil, fmt.Errorf("no 200 response")
	}
	for status, ref := range errRefs {
		o.Responses[status] = ref
	}
	return o, reqRefs, respRefs, nil
}

// refsOf returns the component names s refers to.
func refsOf(s any) []string {
	var refs []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if r, ok := x.(string); ok && k == "$ref" {
					refs = append(refs, strings.TrimPrefix(r, "#/components/schemas/"))
				} else {
					walk(x)
				}
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(s)
	return refs
}

// closure returns the schemas reachable from roots.
func closure(roots []string, all map[string]map[string]any) map[string]bool {
	seen := map[string]bool{}
	var visit func(string)
	visit = func(name string) {
		if seen[name] {
			return
		}
		seen[name] = true
		for _, r := range refsOf(all[name]) {
			visit(r)
		}
	}
	for _, r := range roots {
		visit(r)
	}
	return seen
}

// protoSemantics states the gateway's JSON encoding (protojson,
// EmitUnpopulated) on the schema of the proto definition def: a singular
// message field outside a oneof may be null; with responseOnly, every field
// outside a oneof is always present.
func protoSemantics(s map[string]any, def string, files interface {
	FindDescriptorByName(protoreflect.FullName) (protoreflect.Descriptor, error)
}, responseOnly bool) error {
	d, err := files.FindDescriptorByName(protoreflect.FullName(def))
	if err != nil {
		return fmt.Errorf("proto %s: %w", def, err)
	}
	md, ok := d.(protoreflect.MessageDescriptor)
	if !ok {
		if _, isEnum := d.(protoreflect.EnumDescriptor); isEnum {
			return nil
		}
		return fmt.Errorf("proto %s is neither a message nor an enum", def)
	}
	props, _ := s["properties"].(map[string]any)
	var required []string
	for name, p := range props {
		fd := md.Fields().ByName(protoreflect.Name(name))
		if fd == nil {
			return fmt.Errorf("property %s is no field of %s (json_names_for_fields=false expected)", name, def)
		}
		if fd.Message() != nil && fd.Cardinality() != protoreflect.Repeated && fd.ContainingOneof() == nil {
			n, err := nullable(p.(map[string]any))
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			props[name] = n
		}
		if fd.ContainingOneof() == nil {
			required = append(required, name)
		}
	}
	if responseOnly && len(required) > 0 {
		slices.Sort(required)
		s["required"] = required
	}
	return nil
}

// nullable returns s that also admits null.
func nullable(s map[string]any) (map[string]any, error) {
	if ref, ok := s["$ref"]; ok {
		out := map[string]any{"anyOf": []any{map[string]any{"$ref": ref}, map[string]any{"type": "null"}}}
		for k, v := range s {
			if k != "$ref" {
				out[k] = v
			}
		}
		return out, nil
	}
	switch t := s["type"].(type) {
	case nil: // any value, null included
		return s, nil
	case string:
		if _, ok := s["enum"]; ok {
			return nil, fmt.Errorf("a nullable enum")
		}
		s["type"] = []any{t, "null"}
		return s, nil
	default:
		return nil, fmt.Errorf("type %v", t)
	}
}

// errorComponents adds one response per HTTP status of the error table
// (and a default) to comps, and returns the operations' references to them
// by status.
func errorComponents(comps *components, statuses map[opjournal.Code]int) (map[string]any, error) {
	byStatus := map[int][]string{}
	for code, st := range statuses {
		if st < 400 || st > 599 {
			return nil, fmt.Errorf("code %s maps to HTTP %d", code, st)
		}
		byStatus[st] = append(byStatus[st], string(code))
	}
	refs := map[string]any{}
	content := map[string]any{jsonType: map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/Error"}}}
	for st, codes := range byStatus {
		slices.Sort(codes)
		name := strings.ReplaceAll(http.StatusText(st), " ", "")
		if name == "" {
			return nil, fmt.Errorf("HTTP %d has no name", st)
		}
		r := map[string]any{
			"description": fmt.Sprintf("%s: error.code is %s.", http.StatusText(st), strings.Join(codes, " or ")),
			"content":     content,
		}
		if st == http.StatusTooManyRequests {
			r["headers"] = map[string]any{"Retry-After": map[string]any{
				"description": "Seconds to wait before retrying.",
				"schema":      map[string]any{"type": "integer"},
			}}
		}
		comps.Responses[name] = r
		refs[strconv.Itoa(st)] = map[string]any{"$ref": "#/components/responses/" + name}
	}
	comps.Responses["UnexpectedError"] = map[string]any{
		"description": "Any other failure (e.g. 504 when the call's deadline passes), in the same error body.",
		"content":     content,
	}
	refs["default"] = map[string]any{"$ref": "#/components/responses/UnexpectedError"}
	return refs, nil
}

// errorSchemas returns the schemas Error (server/http.go writeError's body)
// and ErrorCode (opjournal's codes, by HTTP status then name).
func errorSchemas(statuses map[opjournal.Code]int) (errSchema, codeSchema map[string]any) {
	codes := make([]opjournal.Code, 0, len(statuses))
	for c := range statuses {
		codes = append(codes, c)
	}
	slices.SortFunc(codes, func(a, b opjournal.Code) int {
		return cmp.Or(cmp.Compare(statuses[a], statuses[b]), cmp.Compare(a, b))
	})
	enum := make([]any, len(codes))
	var lines []string
	for i, c := range codes {
		enum[i] = string(c)
		lines = append(lines, fmt.Sprintf("- %s: HTTP %d", c, statuses[c]))
	}
	codeSchema = map[string]any{
		"type":        "string",
		"enum":        enum,
		"description": "The opjournal error code (package opjournal, error.go) and the HTTP status it is sent with (server/errors.go):\n" + strings.Join(lines, "\n"),
	}
	errSchema = map[string]any{
		"type":        "object",
		"description": "The body of every REST error.",
		"required":    []any{"error"},
		"properties": map[string]any{
			"error": map[string]any{
				"type":     "object",
				"required": []any{"code", "message"},
				"properties": map[string]any{
					"code":    map[string]any{"$ref": "#/components/schemas/ErrorCode"},
					"message": map[string]any{"type": "string", "description": "What is wrong, in words; never quotes payload values or secrets."},
					"field":   map[string]any{"type": "string", "description": "The request field at fault (e.g. \"operation_key\", \"payload/amount_minor\"); absent when none is."},
					"details": map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"},
						"description": "Facts for programs about the refusal, as strings; absent when there are none. BUDGET_EXCEEDED: budget, action, limit, used, window_seconds and, when it may fit later, retry_after_seconds (also the Retry-After header)."},
				},
			},
		},
	}
	return errSchema, codeSchema
}
