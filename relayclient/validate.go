package relayclient

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalid marks a call the client refused before sending it: a
// namespace, endpoint id or reservation id in a path that relay would
// refuse. The rules are relay's own, so a name refused here is refused
// there too; checking them first keeps a name from reshaping the path.
var ErrInvalid = errors.New("relayclient: invalid argument")

// MaxOutcomesPerRequest is the most outcomes relay takes in one request;
// IngestAll splits longer slices.
const MaxOutcomesPerRequest = 100

// validName reports whether s is a namespace or endpoint id:
// [a-z0-9][a-z0-9_-]{0,62}.
func validName(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// validClientRID reports whether s is a reservation id a client may name:
// 1 to 128 of [A-Za-z0-9._:-], not starting "s:" (relay's synthetic rows).
func validClientRID(s string) bool {
	return !strings.HasPrefix(s, "s:") && validRID(s)
}

// validRID reports whether s is 1 to 128 of [A-Za-z0-9._:-], as every
// reservation id is, and so every start of one.
func validRID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

func checkNamespace(op, ns string) error {
	if !validName(ns) {
		return fmt.Errorf("%w: %s: namespace must be 1 to 63 characters of a-z, 0-9, '_' and '-', starting with a letter or digit", ErrInvalid, op)
	}
	return nil
}

func checkEndpoint(op, ns, id string) error {
	if err := checkNamespace(op, ns); err != nil {
		return err
	}
	if !validName(id) {
		return fmt.Errorf("%w: %s: endpoint id must be 1 to 63 characters of a-z, 0-9, '_' and '-', starting with a letter or digit", ErrInvalid, op)
	}
	return nil
}
