package outbox

import (
	"errors"
	"fmt"

	"github.com/hookrelay/relay/internal/outbox/schema"
)

// Errors callers branch on.
var (
	// ErrInvalid marks input that breaks a documented rule: a bad id, an
	// invalid outcome or endpoint. The error's text is a user-facing
	// explanation that names fields, never their secret values. It is the
	// stored format's schema.ErrInvalid, so a value its codecs refuse
	// matches it too.
	ErrInvalid = schema.ErrInvalid
	// ErrTooManyEndpoints: a new endpoint would pass the namespace's
	// limit (an *EndpointLimitError), or an ingest found more endpoints
	// than one outcome's batch can fan out to (MaxIngestEndpoints).
	// Nothing was written.
	ErrTooManyEndpoints = errors.New("outbox: namespace has too many endpoints")
	// ErrTooManyNamespaces: a new namespace would pass the store's limit
	// of them (a *NamespaceLimitError). Nothing was written.
	ErrTooManyNamespaces = errors.New("outbox: too many namespaces")
	// ErrContended: every planned batch lost to concurrent writers until the
	// retry bound ran out. Items answered before were written; the rest were
	// not, and a retry of the request is safe.
	ErrContended = errors.New("outbox: too much contention on namespace")
	// ErrBacklogUnderflow: acknowledging a row that the backlog does not
	// count. The acknowledgement is refused rather than wrapping around.
	ErrBacklogUnderflow = errors.New("outbox: acknowledgement exceeds backlog")
	// ErrBacklogFull: accepting would take a stream's backlog count past
	// store.MaxCounter, a value acknowledgements could never reduce.
	// Nothing was written; ingest succeeds again once deliveries drain it.
	ErrBacklogFull = errors.New("outbox: backlog count at its limit")
	// ErrEndpointEdited: rows were accepted under another endpoint row
	// than the reader holds (ReadArrivedUnder); nothing was listed.
	ErrEndpointEdited = errors.New("outbox: endpoint edited since it was read")
)

// EndpointLimitError refuses a new endpoint in a namespace that holds Max
// endpoints, its limit, or more. It matches ErrTooManyEndpoints.
type EndpointLimitError struct{ Max int }

func (e *EndpointLimitError) Error() string {
	return fmt.Sprintf("outbox: a namespace holds at most %d endpoints", e.Max)
}

// Is matches ErrTooManyEndpoints.
func (e *EndpointLimitError) Is(target error) bool { return target == ErrTooManyEndpoints }

// NamespaceLimitError refuses the first endpoint of a namespace while the
// store holds Max namespaces, its limit, or more. It matches
// ErrTooManyNamespaces.
type NamespaceLimitError struct{ Max int }

func (e *NamespaceLimitError) Error() string {
	return fmt.Sprintf("outbox: relay holds at most %d namespaces", e.Max)
}

// Is matches ErrTooManyNamespaces.
func (e *NamespaceLimitError) Is(target error) bool { return target == ErrTooManyNamespaces }

// The errors of invalid and undecodable rows are the stored format's.
var (
	invalidf = schema.Invalidf
	corruptf = schema.Corruptf
)
