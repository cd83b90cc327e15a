package delivery

import (
	"bytes"
	"sync"
	"sync/atomic"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// maxCachedEndpoints bounds endpointCache: past it the cache starts afresh.
const maxCachedEndpoints = 4096

// endpointCache holds each stream's endpoint as decoded, with the row it
// was decoded from, so that a fire reading the same row bytes as the last
// takes the endpoint as decoded then rather than decoding (and re-encoding,
// to check it is canonical) its JSON again. A changed row is decoded
// afresh. The decoded endpoint is shared by the fires of its stream, which
// only read it.
type endpointCache struct {
	m sync.Map // endpointRef to *decodedEndpoint
	n atomic.Int64
}

type endpointRef struct{ ns, id string }

type decodedEndpoint struct {
	row store.Value
	ep  schema.Endpoint
}

// decode is schema.DecodeEndpoint(v) for endpoint id of namespace ns.
func (c *endpointCache) decode(ns, id string, v store.Value) (schema.Endpoint, error) {
	ref := endpointRef{ns, id}
	if d, ok := c.m.Load(ref); ok && bytes.Equal(d.(*decodedEndpoint).row, v) {
		return d.(*decodedEndpoint).ep, nil
	}
	ep, err := schema.DecodeEndpoint(v)
	if err != nil {
		return ep, err
	}
	if _, had := c.m.Swap(ref, &decodedEndpoint{row: bytes.Clone(v), ep: ep}); !had && c.n.Add(1) > maxCachedEndpoints {
		c.m.Clear()
		c.n.Store(0)
	}
	return ep, nil
}
