package policy

import (
	"fmt"
	"regexp"
	"strings"
)

// envNameRE is the syntax of an environment variable name in a ${VAR}
// reference.
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// EnvRef is one ${NAME} or ${NAME:-default} reference in a policy value.
type EnvRef struct {
	// Name is the variable's name.
	Name string
	// Default is the text after ":-", used when the variable is unset or
	// empty; HasDefault says whether the reference has one.
	Default    string
	HasDefault bool
}

// ExpandEnv replaces every ${NAME} and ${NAME:-default} reference in s with
// the value lookup returns for NAME (os.LookupEnv in production). A
// reference with a default takes the default when the variable is unset or
// empty; a reference without one fails if the variable is unset. Text
// outside references, including a lone '$', is kept as is.
//
// The error names the variable, never a value, because values are usually
// secrets (tokens in headers).
func ExpandEnv(s string, lookup func(string) (string, bool)) (string, error) {
	var b strings.Builder
	err := scanEnv(s, func(lit string) { b.WriteString(lit) }, func(ref EnvRef) error {
		v, ok := lookup(ref.Name)
		switch {
		case ref.HasDefault && v == "":
			b.WriteString(ref.Default)
		case !ok:
			return fmt.Errorf("environment variable %s is not set", ref.Name)
		default:
			b.WriteString(v)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return b.String(), nil
}

// EnvRefs returns the ${...} references in s, in order, or an error if s
// holds a malformed one (an unterminated "${", or an invalid name).
func EnvRefs(s string) ([]EnvRef, error) {
	var refs []EnvRef
	err := scanEnv(s, func(string) {}, func(r EnvRef) error {
		refs = append(refs, r)
		return nil
	})
	return refs, err
}

// scanEnv splits s into literal text and ${...} references.
func scanEnv(s string, lit func(string), ref func(EnvRef) error) error {
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			lit(s)
			return nil
		}
		lit(s[:i])
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return fmt.Errorf("unterminated ${ at offset %d: write ${NAME} or ${NAME:-default}", i)
		}
		body := s[i+2 : i+end]
		r := EnvRef{Name: body}
		if name, def, ok := strings.Cut(body, ":-"); ok {
			r = EnvRef{Name: name, Default: def, HasDefault: true}
		}
		if !envNameRE.MatchString(r.Name) {
			return fmt.Errorf("%s is not a valid reference: write ${NAME} or ${NAME:-default}, NAME made of A-Z, a-z, 0-9 and '_'", literal("${"+body+"}"))
		}
		if err := ref(r); err != nil {
			return err
		}
		s = s[i+end+1:]
	}
}
