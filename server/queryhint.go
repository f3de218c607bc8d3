package server

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/opjournal/opjournal"
)

// The query of a REST GET is checked against its request message before
// the gateway reads it, as a body is (fieldhint.go): the gateway skips a
// parameter it does not know, so GET /v1/operations?statuse=unknown, a
// typo, would list the whole tenant as if no filter had been asked for.
// An unknown parameter is refused with the nearest one and the list of
// those accepted. Enum values are also taken in the lower-case words of
// the CLI and the docs (statuses=succeeded, view=full), besides their
// proto names (STATUS_SUCCEEDED) and numbers, and a repeated one may list
// several values separated by commas.

// checkQuery checks the query of a GET to method and returns it in the
// gateway's terms (enum values by proto name), or an INVALID_ARGUMENT
// *opjournal.Error naming the parameter.
func checkQuery(method, route string, q url.Values) (url.Values, error) {
	md := requestMessage(method)
	if md == nil || len(q) == 0 {
		return q, nil
	}
	out := url.Values{}
	for _, name := range sortedKeys(q) {
		fd, err := queryField(md, name, route)
		if err != nil {
			return nil, err
		}
		if fd.Kind() != protoreflect.EnumKind {
			out[name] = q[name]
			continue
		}
		for _, v := range q[name] {
			parts := []string{v}
			if fd.IsList() {
				parts = strings.Split(v, ",")
			}
			for _, p := range parts {
				ev, err := enumValue(fd, strings.TrimSpace(p), string(fd.Name()))
				if err != nil {
					return nil, err
				}
				out.Add(name, ev)
			}
		}
	}
	return out, nil
}

// queryField finds the field a query parameter sets: a field by proto or
// JSON name, NAME[KEY] for a map, a dotted path into a message field.
func queryField(md protoreflect.MessageDescriptor, name, route string) (protoreflect.FieldDescriptor, error) {
	base, key, isMap := strings.Cut(name, "[")
	if isMap && (!strings.HasSuffix(key, "]") || len(key) < 2) {
		return nil, queryErr(md, name, route, fmt.Sprintf("malformed query parameter %q", name), "")
	}
	first, rest, nested := strings.Cut(base, ".")
	fds := md.Fields()
	fd := fds.ByName(protoreflect.Name(first))
	if fd == nil {
		fd = fds.ByJSONName(first)
	}
	switch {
	case fd == nil:
		s := nearestField(md, first)
		if s != "" && (isMap || nested) {
			s += name[len(first):]
		} else if s != "" && fds.ByName(protoreflect.Name(s)).IsMap() {
			s += "[NAME]"
		}
		return nil, queryErr(md, name, route, fmt.Sprintf("unknown query parameter %q", name), s)
	case fd.IsMap() && !isMap:
		return nil, queryErr(md, name, route, fmt.Sprintf("query parameter %q takes a key: %s[NAME]=VALUE", name, fd.Name()), "")
	case !fd.IsMap() && isMap:
		return nil, queryErr(md, name, route, fmt.Sprintf("query parameter %q is not a map: give %s=VALUE", name, fd.Name()), "")
	case nested && fd.Message() == nil:
		return nil, queryErr(md, name, route, fmt.Sprintf("unknown query parameter %q (%s has no fields)", name, fd.Name()), "")
	case nested:
		return queryField(fd.Message(), rest, route)
	}
	return fd, nil
}

// queryErr is the refusal of a query parameter: what is wrong, the
// suggestion if any, and the parameters the route accepts.
func queryErr(md protoreflect.MessageDescriptor, name, route, msg, suggestion string) error {
	if suggestion != "" {
		msg += fmt.Sprintf("; did you mean %q?", suggestion)
	}
	msg += fmt.Sprintf(" (the query parameters of %s: %s)", route, strings.Join(queryNames(md), ", "))
	return opjournal.Errorf(opjournal.CodeInvalidArgument, name, "%s", msg)
}

// queryNames lists the parameters a request message accepts, maps as
// NAME[KEY].
func queryNames(md protoreflect.MessageDescriptor) []string {
	names := fieldNames(md)
	for i, n := range names {
		if md.Fields().Get(i).IsMap() {
			names[i] = n + "[NAME]"
		}
	}
	if len(names) == 0 {
		return []string{"none"}
	}
	return names
}

// enumValue maps a value of an enum field to its proto name: the name
// itself, its number, or its short form without the enum's prefix in any
// case ("succeeded", "SUCCEEDED" for STATUS_SUCCEEDED).
func enumValue(fd protoreflect.FieldDescriptor, v, path string) (string, error) {
	ed := fd.Enum()
	vals := ed.Values()
	if vals.ByName(protoreflect.Name(v)) != nil {
		return v, nil
	}
	if n, err := strconv.Atoi(v); err == nil && vals.ByNumber(protoreflect.EnumNumber(n)) != nil {
		return v, nil
	}
	prefix := enumPrefix(ed)
	var short []string
	for i := 0; i < vals.Len(); i++ {
		full := string(vals.Get(i).Name())
		s := strings.ToLower(strings.TrimPrefix(full, prefix))
		if strings.EqualFold(v, s) || strings.EqualFold(v, full) {
			return full, nil
		}
		if vals.Get(i).Number() != 0 {
			short = append(short, s)
		}
	}
	msg := fmt.Sprintf("%q is not a value of %s", v, path)
	if s := nearest(v, short); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	}
	msg += fmt.Sprintf(" (%s, or their %sNAME forms)", strings.Join(short, ", "), prefix)
	return "", opjournal.Errorf(opjournal.CodeInvalidArgument, path, "%s", msg)
}

// enumPrefix is the prefix all of an enum's value names share, up to its
// last underscore ("STATUS_", "OPERATION_VIEW_").
func enumPrefix(ed protoreflect.EnumDescriptor) string {
	vals := ed.Values()
	if vals.Len() == 0 {
		return ""
	}
	p := string(vals.Get(0).Name())
	for i := 1; i < vals.Len(); i++ {
		n := string(vals.Get(i).Name())
		for !strings.HasPrefix(n, p) {
			p = p[:len(p)-1]
		}
	}
	if i := strings.LastIndexByte(p, '_'); i >= 0 {
		return p[:i+1]
	}
	return ""
}
