package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/store"
)

// DefaultPrefix and DefaultBuckets are used when Options leaves them unset.
const (
	DefaultPrefix  = "relay:"
	DefaultBuckets = 64
	// MaxBuckets is the number of Redis Cluster slots: more buckets could not
	// spread any further.
	MaxBuckets = 16384
	// MaxScanLimit caps one Scan page; a larger limit is clamped to it.
	MaxScanLimit = 1000
	// Format is the version of the stored format this code reads and
	// writes, recorded in a keyspace at its first use.
	Format = 1
)

var (
	// ErrBucketMismatch: the keyspace was first used with another bucket
	// count. Changing it would move namespaces between due indexes.
	ErrBucketMismatch = errors.New("redisstore: bucket count mismatch")
	// ErrFormat: the keyspace records a format version this code does not
	// know, or holds rows but records none. Reading it would misread rows.
	ErrFormat = errors.New("redisstore: keyspace format")
	// ErrOutOfMemory: Redis is at maxmemory with noeviction and refused a
	// batch that could grow it. Nothing was written. An error that matches
	// it also matches store.ErrUnavailable.
	ErrOutOfMemory = errors.New("redisstore: redis out of memory")
)

// Options configure a Store.
type Options struct {
	// Prefix starts every Redis key, "relay:" when empty. It must not
	// contain '{' or '}', which would break the bucket hash tags.
	Prefix string
	// Buckets is the number of due-index buckets, 64 when zero. It is fixed
	// when a keyspace is first used.
	Buckets int
	// Durability is when Apply answers a growing batch; the zero value
	// once the master ran it.
	Durability Durability
}

// Store is a store.NamespaceStore and store.DueIndex on Redis. It is safe for
// concurrent use. It does not own the client: the caller closes it.
//
// A call that fails because Redis is away or not serving for now (refused,
// reset or timed-out connections, LOADING, READONLY, MASTERDOWN,
// CLUSTERDOWN, TRYAGAIN, BUSY) or full (ErrOutOfMemory) returns an error
// that matches store.ErrUnavailable, with the cause in its chain. One that
// fails because its ctx ended matches ctx's error.
type Store struct {
	client  redis.UniversalClient
	prefix  string
	buckets int
	tags    []string // "<prefix>{<b>}" by bucket, built once
	dues    []string // "<prefix>{<b>}:due" by bucket
	regs    []string // "<prefix>{<b>}:namespaces" by bucket
	scripts *scripts
	// durability is Options.Durability with its defaults.
	durability Durability
	// applies sends concurrent batches together.
	applies *masters
}

var (
	_ store.NamespaceStore = (*Store)(nil)
	_ store.DueIndex       = (*Store)(nil)
	_ store.Registry       = (*Store)(nil)
)

// New checks the options, records or checks the keyspace's format version
// and bucket count, and loads the scripts on every master.
func New(ctx context.Context, client redis.UniversalClient, opts Options) (*Store, error) {
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if strings.ContainsAny(opts.Prefix, "{}") {
		return nil, fmt.Errorf("redisstore: prefix %q must not contain '{' or '}'", opts.Prefix)
	}
	if opts.Buckets == 0 {
		opts.Buckets = DefaultBuckets
	}
	if opts.Buckets < 1 || opts.Buckets > MaxBuckets {
		return nil, fmt.Errorf("redisstore: buckets %d out of range 1..%d", opts.Buckets, MaxBuckets)
	}
	durability, err := opts.Durability.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Store{client: client, prefix: opts.Prefix, buckets: opts.Buckets, tags: make([]string, opts.Buckets), dues: make([]string, opts.Buckets), regs: make([]string, opts.Buckets), durability: durability}
	for b := range s.tags {
		s.tags[b] = opts.Prefix + "{" + strconv.Itoa(b) + "}"
		s.dues[b] = s.tags[b] + ":due"
		s.regs[b] = s.tags[b] + ":namespaces"
	}
	if err := s.checkFormat(ctx); err != nil {
		return nil, err
	}
	if err := s.checkBuckets(ctx); err != nil {
		return nil, err
	}
	sc, err := loadScripts(ctx, client)
	if err != nil {
		return nil, err
	}
	s.scripts = sc
	s.applies = newMasters(client)
	return s, nil
}

// checkFormat records Format in an empty keyspace and refuses one that
// records another version, or none while it holds rows. Every relay records
// the bucket count at first use, so a keyspace with a bucket count and no
// version was written before versions were recorded: one GET tells, where
// a SCAN for any key under the prefix would walk a whole shared database.
// The version is written before the bucket count, and the count read before
// the version, so a relay starting beside another's first start never sees
// the count without the version.
func (s *Store) checkFormat(ctx context.Context) error {
	key, bucketsKey := s.prefix+"format", s.prefix+"buckets"
	used, err := s.client.Exists(ctx, bucketsKey).Result()
	if err != nil {
		return fmt.Errorf("redisstore: read bucket count: %w", err)
	}
	got, err := s.client.Get(ctx, key).Result()
	switch {
	case errors.Is(err, redis.Nil) && used > 0:
		return fmt.Errorf("%w: keyspace %q holds rows but records no format version (%s is unset); this relay reads format %d only", ErrFormat, s.prefix, key, Format)
	case errors.Is(err, redis.Nil):
		// An empty keyspace keeps its totals from its first write.
		if err := s.client.SetNX(ctx, s.totalsMarkerKey(), "1", 0).Err(); err != nil {
			return fmt.Errorf("redisstore: record totals marker: %w", err)
		}
		if err := s.client.SetNX(ctx, key, Format, 0).Err(); err != nil {
			return fmt.Errorf("redisstore: record format version: %w", err)
		}
		if got, err = s.client.Get(ctx, key).Result(); err != nil {
			return fmt.Errorf("redisstore: read format version: %w", err)
		}
	case err != nil:
		return fmt.Errorf("redisstore: read format version: %w", err)
	}
	if got != strconv.Itoa(Format) {
		return fmt.Errorf("%w: keyspace %q is of format %q; this relay reads format %d only", ErrFormat, s.prefix, got, Format)
	}
	return nil
}

func (s *Store) checkBuckets(ctx context.Context) error {
	key := s.prefix + "buckets"
	if err := s.client.SetNX(ctx, key, s.buckets, 0).Err(); err != nil {
		return fmt.Errorf("redisstore: record bucket count: %w", err)
	}
	got, err := s.client.Get(ctx, key).Result()
	if err != nil {
		return fmt.Errorf("redisstore: read bucket count: %w", err)
	}
	n, err := strconv.Atoi(got)
	if err != nil {
		return fmt.Errorf("redisstore: recorded bucket count %q at %s is not a number", got, key)
	}
	if n != s.buckets {
		return fmt.Errorf("%w: keyspace %q was created with %d buckets, configured %d", ErrBucketMismatch, s.prefix, n, s.buckets)
	}
	return nil
}

// Durability is the store's durability policy, with its defaults.
func (s *Store) Durability() Durability { return s.durability }

// Shebang reports whether the server runs scripts with a "#!lua" line
// (Redis 7+). Without it no batch can declare allow-oom: on a full Redis a
// settling batch that puts any row is refused like an ingest batch, and the
// store cannot settle. The binary warns when this is false.
func (s *Store) Shebang() bool { return s.scripts.shebang }

// Buckets is the number of due-index buckets.
func (s *Store) Buckets() int { return s.buckets }

// BucketOf is FNV-1a (32-bit) of the namespace modulo the bucket count.
func (s *Store) BucketOf(p store.Partition) int {
	const offset, prime = 2166136261, 16777619
	h := uint32(offset)
	for i := 0; i < len(p.Namespace); i++ {
		h ^= uint32(p.Namespace[i])
		h *= prime
	}
	return int(h % uint32(s.buckets))
}

// partitionKeys are the values HASH, the order ZSET, the bucket's due
// index, registry, totals, summed set and flag sets of p, in the order
// apply.lua takes them.
func (s *Store) partitionKeys(p store.Partition) []string {
	b := s.BucketOf(p)
	t := s.tags[b]
	return []string{t + ":ns:" + p.Namespace + ":rows", t + ":ns:" + p.Namespace + ":keys", s.dues[b], s.regs[b],
		t + totalsSuffix, t + summedSuffix, t + flagSuffixes[0], t + flagSuffixes[1]}
}

func (s *Store) dueKey(b int) string { return s.dues[b] }

// Get returns the row's value and whether it exists.
func (s *Store) Get(ctx context.Context, p store.Partition, key store.Key) (store.Value, bool, error) {
	if err := p.Validate(); err != nil {
		return nil, false, err
	}
	b := s.BucketOf(p)
	v, err := s.client.HGet(ctx, s.tags[b]+":ns:"+p.Namespace+":rows", string(key)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("get %s: %w", p, classify(ctx, err))
	}
	return store.Value(v), true, nil
}

// GetMany reads the rows with one HMGET, so they come from one instant.
func (s *Store) GetMany(ctx context.Context, p store.Partition, keys []store.Key) ([]store.Row, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if len(keys) > store.MaxBatchOps {
		return nil, fmt.Errorf("get %d rows of %s: at most %d at once", len(keys), p, store.MaxBatchOps)
	}
	if len(keys) == 0 {
		return nil, nil
	}
	fields := make([]string, len(keys))
	for i, k := range keys {
		fields[i] = string(k)
	}
	b := s.BucketOf(p)
	vals, err := s.client.HMGet(ctx, s.tags[b]+":ns:"+p.Namespace+":rows", fields...).Result()
	if err != nil {
		return nil, fmt.Errorf("get rows of %s: %w", p, classify(ctx, err))
	}
	rows, err := decodeRows(vals, len(keys))
	if err != nil {
		return nil, fmt.Errorf("get rows of %s: %w", p, err)
	}
	return rows, nil
}

// Scan returns up to limit rows with keys in [start, end) in byte order,
// strictly after the cursor when one is given. A limit above MaxScanLimit is
// clamped to it (Next says whether more remain); a limit below 1 is an error.
func (s *Store) Scan(ctx context.Context, p store.Partition, start, end store.Key, after *store.Cursor, limit int) (store.Page, error) {
	if err := p.Validate(); err != nil {
		return store.Page{}, err
	}
	if limit < 1 {
		return store.Page{}, fmt.Errorf("scan %s: limit %d must be at least 1", p, limit)
	}
	limit = min(limit, MaxScanLimit)
	lower := "[" + string(start)
	if after != nil && after.After() >= start {
		lower = "(" + string(after.After())
	}
	if end <= start || (after != nil && after.After() >= end) {
		return store.Page{}, nil
	}
	keys := s.partitionKeys(p)
	res, err := s.scripts.read.run(ctx, s.client, keys[:2], blockTag, "1", "s", lower, "("+string(end), limit)
	if err != nil {
		return store.Page{}, fmt.Errorf("scan %s: %w", p, classify(ctx, err))
	}
	replies, ok := res.([]any)
	if !ok || len(replies) != 1 {
		return store.Page{}, fmt.Errorf("scan %s: unexpected reply of type %T", p, res)
	}
	page, err := decodePage(replies[0])
	if err != nil {
		return store.Page{}, fmt.Errorf("scan %s: %w", p, err)
	}
	return page, nil
}

// ScanUnordered pages through the rows that start with store.UnorderedTag
// with one HSCAN of the partition's values, matching their first byte:
// HSCAN's guarantee is the contract's (every row present for the whole walk
// at least once, maybe twice), and its COUNT the limit's hint. The cursor
// is HSCAN's, in decimal.
func (s *Store) ScanUnordered(ctx context.Context, p store.Partition, after *store.Cursor, limit int) (store.Page, error) {
	if err := p.Validate(); err != nil {
		return store.Page{}, err
	}
	if limit < 1 {
		return store.Page{}, fmt.Errorf("scan unordered rows of %s: limit %d must be at least 1", p, limit)
	}
	var from uint64
	if after != nil {
		n, err := strconv.ParseUint(string(after.After()), 10, 64)
		if err != nil || n == 0 {
			return store.Page{}, fmt.Errorf("scan unordered rows of %s: the cursor is not one of this scan's", p)
		}
		from = n
	}
	b := s.BucketOf(p)
	kv, next, err := s.client.HScan(ctx, s.tags[b]+":ns:"+p.Namespace+":rows", from, unorderedMatch, int64(min(limit, MaxScanLimit))).Result()
	if err != nil {
		return store.Page{}, fmt.Errorf("scan unordered rows of %s: %w", p, classify(ctx, err))
	}
	if len(kv)%2 != 0 {
		return store.Page{}, fmt.Errorf("scan unordered rows of %s: a reply of %d fields and values", p, len(kv))
	}
	var page store.Page
	if len(kv) > 0 {
		page.Entries = make([]store.Entry, 0, len(kv)/2)
	}
	for i := 0; i < len(kv); i += 2 {
		page.Entries = append(page.Entries, store.Entry{Key: store.Key(kv[i]), Value: store.Value(kv[i+1])})
	}
	if next != 0 {
		page.Next = store.CursorAfter(store.Key(strconv.FormatUint(next, 10)))
	}
	return page, nil
}

// blockTag is store.BlockTag, as read.lua takes it.
var blockTag = string([]byte{store.BlockTag})

// unorderedMatch is the HSCAN pattern of the unordered rows: their first
// byte, escaped when glob would read it otherwise, then anything.
var unorderedMatch = globLiteral(store.UnorderedTag) + "*"

func globLiteral(b byte) string {
	if strings.IndexByte(`*?[]\^`, b) >= 0 {
		return `\` + string([]byte{b})
	}
	return string([]byte{b})
}

func decodePage(res any) (store.Page, error) {
	arr, ok := res.([]any)
	if !ok || len(arr) == 0 || len(arr)%2 != 1 {
		return store.Page{}, fmt.Errorf("unexpected scan reply of type %T", res)
	}
	more, ok := arr[0].(int64)
	if !ok {
		return store.Page{}, fmt.Errorf("unexpected scan reply head %T", arr[0])
	}
	var page store.Page
	if n := (len(arr) - 1) / 2; n > 0 {
		page.Entries = make([]store.Entry, 0, n)
	}
	for i := 1; i < len(arr); i += 2 {
		k, ok := arr[i].(string)
		if !ok {
			return store.Page{}, fmt.Errorf("unexpected scan key of type %T", arr[i])
		}
		v, ok := arr[i+1].(string)
		if !ok {
			// The order set names a row the values hash lacks.
			return store.Page{}, fmt.Errorf("%w: row %q is indexed but has no value", store.ErrCorrupt, k)
		}
		page.Entries = append(page.Entries, store.Entry{Key: store.Key(k), Value: store.Value(v)})
	}
	if more == 1 && len(page.Entries) > 0 {
		page.Next = store.CursorAfter(page.Entries[len(page.Entries)-1].Key)
	}
	return page, nil
}

// Apply applies the batch atomically in one script, or reports the first
// failing precondition and writes nothing. It also keeps the bucket's due
// index equal to the partition's earliest timer row, and the partition's
// entry in the bucket's registry present while it holds a row key that
// starts with store.RegistryTag, both read from the rows the batch left.
// The due time is read from the timer's key:
// a put of a key that starts with store.TimerTag but is shorter than
// store.MinTimerKey is refused with store.ErrInvalidBatch. A counter add is
// computed in the script from the row as it stands, after the preconditions
// and before any write: a row of another layout refuses the batch with
// store.ErrCorrupt, a counter leaving its range with store.ErrCounterRange.
// A put-range is spliced into the row the same way, and a row absent or
// too short for it refuses the batch with store.ErrCorrupt.
//
// go-redis retries a command after a network error, so a batch may run
// twice; the NamespaceStore contract makes every batch idempotent or guarded
// by a precondition its first run falsifies, which makes the retry harmless.
//
// With Options.Durability.Replicas N ≥ 1, a growing batch (not Settles), and
// any batch marked Answered, is answered only once N replicas acknowledged
// it (WAIT, see applyDurable);
// fewer within the timeout is an error matching ErrNotReplicated and
// store.ErrUnavailable, though the batch may have committed on the master:
// its resend then fails its guard, as after any lost reply.
func (s *Store) Apply(ctx context.Context, p store.Partition, b store.Batch) (store.Result, error) {
	keys, args, err := s.applyArgs(p, b)
	if err != nil {
		return store.Result{}, err
	}
	if s.durability.Replicas > 0 && (!b.Settles || b.Answered) {
		return s.applyDurable(ctx, p, s.scripts.applyFor(b), keys, args, len(b.Reads))
	}
	sc := s.scripts.applyFor(b)
	var res any
	if b.Ops() <= maxRoundOps {
		res, err = s.applies.run(ctx, sc, keys, args)
	} else {
		res, err = sc.run(ctx, s.client, keys, args...)
	}
	if err != nil {
		return store.Result{}, applyError(ctx, p, err)
	}
	r, err := decodeResult(res, len(b.Reads))
	if err != nil {
		return store.Result{}, fmt.Errorf("apply %s: %w", p, err)
	}
	return r, nil
}

// applyArgs validates p and b and builds apply.lua's KEYS and ARGV.
func (s *Store) applyArgs(p store.Partition, b store.Batch) ([]string, []any, error) {
	if err := p.Validate(); err != nil {
		return nil, nil, err
	}
	if err := b.Validate(); err != nil {
		return nil, nil, fmt.Errorf("apply %s: %w", p, err)
	}
	for i, w := range b.Writes {
		// The due index reads a timer's due time from its key.
		if w.Kind == store.Put && len(w.Key) > 0 && w.Key[0] == store.TimerTag && len(w.Key) < store.MinTimerKey {
			return nil, nil, fmt.Errorf("apply %s: %w: write %d: timer key of %d bytes lacks its due time and kind",
				p, store.ErrInvalidBatch, i, len(w.Key))
		}
	}
	pkinds := make([]byte, len(b.Preconditions))
	wkinds := make([]byte, len(b.Writes))
	a := newArgSlab(len(b.Preconditions)+len(b.Writes), len(b.Reads))
	for i, pc := range b.Preconditions {
		switch pc.Kind {
		case store.Absent:
			pkinds[i] = 'a'
		case store.RangeEquals:
			pkinds[i] = 'r'
			a.pair(pc.Key, encodeRange(pc.Offset, pc.Value))
			continue
		default:
			pkinds[i] = 'e'
		}
		a.pair(pc.Key, pc.Value)
	}
	for i, w := range b.Writes {
		switch w.Kind {
		case store.Delete:
			wkinds[i] = 'd'
		case store.Add:
			wkinds[i] = 'c'
			a.pair(w.Key, encodeAdd(w))
			continue
		case store.PutRange:
			wkinds[i] = 'r'
			a.pair(w.Key, encodeRange(w.Offset, w.Value))
			continue
		default:
			wkinds[i] = 'p'
		}
		a.pair(w.Key, w.Value)
	}
	if len(b.Reads) > 0 {
		a.args = append(a.args, strconv.Itoa(len(b.Reads)))
		for _, key := range b.Reads {
			a.key(key)
		}
	}
	args := a.args
	args[0], args[1], args[2], args[3] = p.Namespace, rowTags, pkinds, wkinds
	return s.partitionKeys(p), args, nil
}

// argSlab holds a script call's arguments. Each one goes into the call as
// a pointer into the slab, which boxes without allocating, where a string
// or a []byte put into an interface costs an allocation each: two per row
// of a batch.
type argSlab struct {
	args []any
	keys []string
	vals []argBytes
}

// newArgSlab leaves room for the four leading arguments of apply.lua, then
// pairs key-value pairs and reads keys read.
func newArgSlab(pairs, reads int) argSlab {
	return argSlab{
		args: make([]any, 4, 5+2*pairs+reads),
		keys: make([]string, 0, pairs+reads),
		vals: make([]argBytes, 0, pairs),
	}
}

func (a *argSlab) key(k store.Key) {
	a.keys = append(a.keys, string(k))
	a.args = append(a.args, &a.keys[len(a.keys)-1])
}

func (a *argSlab) pair(k store.Key, v []byte) {
	a.key(k)
	a.vals = append(a.vals, v)
	a.args = append(a.args, &a.vals[len(a.vals)-1])
}

// argBytes is an argument go-redis sends as it is.
type argBytes []byte

func (b *argBytes) MarshalBinary() ([]byte, error) { return *b, nil }

// rowTags are the timer, registry, unordered and block tags, as apply.lua
// takes them.
var rowTags = string([]byte{store.TimerTag, store.RegistryTag, store.UnorderedTag, store.BlockTag, store.SumTag, store.FlagTags[0], store.FlagTags[1]})

// encodeAdd is a validated Add as apply.lua reads it: the header's length
// and bytes, then per delta a sign and a 7-byte big-endian magnitude. A
// subtraction from a saturating counter is signed '~'.
func encodeAdd(w store.Write) []byte {
	v := make([]byte, 0, 1+len(w.Value)+8*len(w.Deltas))
	v = append(v, byte(len(w.Value)))
	v = append(v, w.Value...)
	for i, d := range w.Deltas {
		sign, m := byte('+'), uint64(d)
		if d < 0 {
			sign, m = '-', uint64(-d)
			if w.Saturating&(1<<i) != 0 {
				sign = '~'
			}
		}
		v = append(v, sign, byte(m>>48), byte(m>>40), byte(m>>32), byte(m>>24), byte(m>>16), byte(m>>8), byte(m))
	}
	return v
}

// encodeRange is a validated PutRange's or RangeEquals's offset and bytes
// as apply.lua reads them: the offset, 4 bytes big-endian (a row is at most
// store.MaxValueBytes), then the bytes.
func encodeRange(offset int, bytes store.Value) []byte {
	o := uint32(offset)
	return append([]byte{byte(o >> 24), byte(o >> 16), byte(o >> 8), byte(o)}, bytes...)
}

// decodeResult is apply.lua's reply to a batch with reads Reads.
func decodeResult(res any, reads int) (store.Result, error) {
	arr, ok := res.([]any)
	if !ok || len(arr) == 0 {
		return store.Result{}, fmt.Errorf("unexpected apply reply of type %T", res)
	}
	code, _ := arr[0].(int64)
	switch {
	case code == 1 && len(arr) == 1 && reads == 0:
		return store.Result{Committed: true}, nil
	case code == 1 && len(arr) == 2:
		read, ok := arr[1].([]any)
		if !ok || len(read) != reads {
			break
		}
		rows := make([]store.Row, len(read))
		for i, v := range read {
			switch v := v.(type) {
			case string:
				rows[i] = store.Row{Value: store.Value(v), Found: true}
			case nil:
			default:
				return store.Result{}, fmt.Errorf("unexpected apply reply row of type %T", v)
			}
		}
		return store.Result{Committed: true, Rows: rows}, nil
	case code == 0 && len(arr) == 2:
		i, ok := arr[1].(int64)
		if ok {
			return store.Result{Failed: int(i)}, nil
		}
	}
	return store.Result{}, fmt.Errorf("unexpected apply reply %v", arr)
}

// applyError classifies a failed Apply; the refusals of a counter add or a
// put-range, which depend on the rows, match the store's errors.
func applyError(ctx context.Context, p store.Partition, err error) error {
	switch msg := err.Error(); {
	case strings.Contains(msg, "relay apply: counter row has another layout"):
		return fmt.Errorf("apply %s: %w: %w", p, store.ErrCorrupt, err)
	case strings.Contains(msg, "relay apply: counter out of range"):
		return fmt.Errorf("apply %s: %w: %w", p, store.ErrCounterRange, err)
	case strings.Contains(msg, "relay apply: put-range row is absent or too short"):
		return fmt.Errorf("apply %s: %w: %w", p, store.ErrCorrupt, err)
	}
	return fmt.Errorf("apply %s: %w", p, classify(ctx, err))
}
