package digest

import (
	"sync"

	"github.com/zeebo/blake3"
)

// Sum256 is blake3.Sum256 with a reused hasher. blake3.Sum256's frame
// holds a whole hasher (over 8 KiB): called on a goroutine whose stack is
// small, or was shrunk by the collector (a request's handler, a delivery
// worker), it made the stack grow, which cost more than the hash.
func Sum256(b []byte) (sum [32]byte) {
	h := hashers.Get().(*blake3.Hasher)
	h.Reset()
	_, _ = h.Write(b)
	h.Sum(sum[:0])
	hashers.Put(h)
	return sum
}

var hashers = sync.Pool{New: func() any { return blake3.New() }}
