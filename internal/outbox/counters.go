package outbox

import (
	"fmt"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// FailedAttemptsNote is the write that counts n failed calls of the stream
// of endpoint: a fire's note, so it stands whatever the fire's other guards
// find, guarded by the fire's lease alone.
func FailedAttemptsNote(endpoint string, n int) (store.Write, error) {
	if err := schema.ValidateEndpointID(endpoint); err != nil {
		return store.Write{}, err
	}
	if n <= 0 {
		return store.Write{}, fmt.Errorf("count %d failed attempts of %s", n, endpoint)
	}
	return schema.AddCounters(endpoint, schema.Counters{FailedAttempts: uint64(n)}), nil
}
