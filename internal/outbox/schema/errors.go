package schema

import (
	"errors"
	"fmt"

	"github.com/hookrelay/relay/internal/store"
)

// ErrInvalid marks a value no row may hold: a bad id, an invalid outcome or
// endpoint. The error's text is a user-facing explanation that names
// fields, never their secret values. outbox.ErrInvalid is this error.
var ErrInvalid = errors.New("schema: invalid value")

// invalidError carries a user-facing message and matches ErrInvalid.
type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

// Invalidf is an error matching ErrInvalid whose text, user-facing, is the
// message formatted.
func Invalidf(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}

// Corruptf is a decoding error wrapping store.ErrCorrupt.
func Corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", store.ErrCorrupt, fmt.Sprintf(format, args...))
}

// Within the package, by their short names.
var (
	invalidf = Invalidf
	corruptf = Corruptf
)
