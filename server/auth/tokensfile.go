package auth

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// FileHeader is the first line of a tokens file: its one top-level key,
// under which every entry is a list item.
const FileHeader = "tokens:\n"

// FileExample is a whole tokens file, as `opjournal token --help` and the
// README show it.
const FileExample = `tokens:
  - name: "payments-agent"    # shown in logs and in the history; unique
    sha256: 5e028cb096c78994d598511f225f0df20d2c78a59e1dece86b449010f398dbf9
    tenant: "payments"        # the only tenant whose operations it reaches
    roles: [agent]            # agent, reconciler, operator, admin, metrics
  - name: "alice"
    sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
    tenant: "payments"
    roles: [operator]
`

// Entry is one token's entry in a tokens file. It holds the token's
// digest, never the token.
type Entry struct {
	// Name identifies the token in logs and in the history.
	Name string
	// Principal is the caller the token belongs to ("": Name). Several
	// tokens of one principal (while one is rotated out) are one caller.
	Principal string
	// SHA256 is the hex SHA-256 of the token (Digest).
	SHA256 string
	// Tenant is the tenant whose operations the token reaches.
	Tenant string
	// Roles are what the token may call.
	Roles []Role
}

// NewEntry returns the entry that grants token to name in tenant with roles.
func NewEntry(name, token, tenant string, roles []Role) Entry {
	return Entry{Name: name, SHA256: Digest(token), Tenant: tenant, Roles: roles}
}

// YAML returns the entry as a list item of a tokens file, indented by
// two spaces, as under FileHeader.
func (e Entry) YAML() string { return e.yaml("  ") }

func (e Entry) yaml(indent string) string {
	roles := make([]string, len(e.Roles))
	for i, r := range e.Roles {
		roles[i] = string(r)
	}
	principal := ""
	if e.Principal != "" {
		principal = fmt.Sprintf("%s  principal: %s\n", indent, strconv.Quote(e.Principal))
	}
	return fmt.Sprintf("%s- name: %s\n%s%s  sha256: %s\n%s  tenant: %s\n%s  roles: [%s]\n",
		indent, strconv.Quote(e.Name), principal, indent, e.SHA256, indent, strconv.Quote(e.Tenant), indent, strings.Join(roles, ", "))
}

// Validate checks the entry as Parse checks the entries of a file.
func (e Entry) Validate() error {
	_, err := Parse([]byte(FileHeader+e.YAML()), "token")
	return err
}

// ParseRoles splits a comma-separated list of roles ("agent,operator"),
// refusing an unknown one.
func ParseRoles(s string) ([]Role, error) {
	var roles []Role
	for _, r := range strings.Split(s, ",") {
		r = strings.TrimSpace(r)
		switch Role(r) {
		case RoleAgent, RoleReconciler, RoleOperator, RoleAdmin, RoleMetrics:
			roles = append(roles, Role(r))
		case "":
		default:
			return nil, fmt.Errorf("unknown role %q (agent, reconciler, operator, admin, metrics)", r)
		}
	}
	if len(roles) == 0 {
		return nil, errors.New("give at least one role: agent, reconciler, operator, admin, metrics")
	}
	return roles, nil
}

// ErrDuplicateName is returned by AppendEntry for a name the file already
// has.
var ErrDuplicateName = errors.New("the tokens file already has a token of that name")

// listItem finds the indentation of the first entry under tokens:.
var listItem = regexp.MustCompile(`(?m)^tokens:[ \t]*(?:#.*)?\r?\n(?:[ \t]*(?:#.*)?\r?\n)*([ \t]*)- `)

// AppendEntry adds e to the tokens file at path. A missing file is
// created, readable by its owner only (0600), with the tokens: header. An
// existing one must be a valid tokens file (or only its header) without a
// token named e.Name (ErrDuplicateName); the entry is appended to its
// list, and nothing else of it changes (comments stay). The file is
// written only if the result is a valid tokens file. created reports
// whether the file was made.
func AppendEntry(path string, e Entry) (created bool, err error) {
	if err := e.Validate(); err != nil {
		return false, err
	}
	old, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return false, fmt.Errorf("tokens file: %w", err)
		}
		if _, err := f.WriteString(FileHeader + e.YAML()); err != nil {
			f.Close()
			return false, fmt.Errorf("tokens file: %w", err)
		}
		return true, f.Close()
	}
	if err != nil {
		return false, fmt.Errorf("tokens file: %w", err)
	}
	f, err := decodeFile(old, path)
	if err != nil {
		return false, err
	}
	for _, t := range f.Tokens {
		if t.Name == e.Name {
			return false, fmt.Errorf("%s: %w: %q (choose another --name, or remove that entry first)", path, ErrDuplicateName, e.Name)
		}
	}
	indent := "  "
	if m := listItem.FindSubmatch(old); m != nil {
		indent = string(m[1])
	}
	add := e.yaml(indent)
	if len(old) > 0 && old[len(old)-1] != '\n' {
		add = "\n" + add
	}
	if _, err := Parse(append(old[:len(old):len(old)], add...), path); err != nil {
		return false, fmt.Errorf("cannot append to %s (add the entry under its tokens: list by hand): %w", path, err)
	}
	w, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return false, fmt.Errorf("tokens file: %w", err)
	}
	if _, err := w.WriteString(add); err != nil {
		w.Close()
		return false, fmt.Errorf("tokens file: %w", err)
	}
	return false, w.Close()
}
