package hookverify

import (
	"container/heap"
	"strings"
	"sync"
	"time"
)

// DefaultNonceCacheSize is the capacity of a NonceCache made with size 0:
// about 13 MB when full, enough for a sustained 330 requests/s at relay's
// default 300 s validity. A busier receiver sizes its own.
const DefaultNonceCacheSize = 100_000

// NonceCache remembers accepted nonces until their signatures expire, so a
// request cannot be accepted twice. It is safe for concurrent use and holds
// at most its size of unexpired nonces: when full, Record refuses with
// ErrNonceCacheFull instead of forgetting a live nonce (forgetting would
// reopen a replay window; refusing only delays a delivery, which the sender
// retries). Expired entries are dropped, earliest expiry first, on every
// Record.
//
// It lives in one process: replicas behind one origin each keep their own,
// so a request replayed to another replica within its window is accepted.
// Such receivers also deduplicate by message.
type NonceCache struct {
	mu    sync.Mutex
	max   int
	now   func() time.Time
	exp   map[string]int64 // nonce -> expiry, Unix ms
	order expiryHeap
}

// NewNonceCache returns a cache of at most size unexpired nonces
// (DefaultNonceCacheSize when size ≤ 0) on clock now (time.Now when nil).
// Give it the verifier's clock.
func NewNonceCache(size int, now func() time.Time) *NonceCache {
	if size <= 0 {
		size = DefaultNonceCacheSize
	}
	if now == nil {
		now = time.Now
	}
	return &NonceCache{max: size, now: now, exp: make(map[string]int64)}
}

// Record accepts nonce, valid until expiresAt, once: a second Record before
// expiresAt returns ErrReplay. A nonce already expired is not stored (its
// signature is refused anyway).
func (c *NonceCache) Record(nonce string, expiresAt time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now().UnixMilli()
	for len(c.order) > 0 && c.order[0].exp <= now {
		e := heap.Pop(&c.order).(expiryEntry)
		delete(c.exp, e.nonce)
	}
	if _, seen := c.exp[nonce]; seen {
		return errorf(ErrReplay, "nonce was accepted before")
	}
	exp := expiresAt.UnixMilli()
	if exp <= now {
		return nil
	}
	if len(c.exp) >= c.max {
		return errorf(ErrNonceCacheFull, "%d unexpired nonces", len(c.exp))
	}
	nonce = strings.Clone(nonce) // do not pin the request's header buffer
	c.exp[nonce] = exp
	heap.Push(&c.order, expiryEntry{exp: exp, nonce: nonce})
	return nil
}

// Len is the number of nonces held, expired ones not yet dropped included.
func (c *NonceCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.exp)
}

type expiryEntry struct {
	exp   int64
	nonce string
}

// expiryHeap is a min-heap by expiry.
type expiryHeap []expiryEntry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].exp < h[j].exp }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(expiryEntry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = expiryEntry{}
	*h = old[:len(old)-1]
	return e
}
