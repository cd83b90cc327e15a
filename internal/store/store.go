package store

import (
	"context"
	"errors"
	"fmt"
)

// MaxBatchOps bounds preconditions plus writes in one batch. A larger batch
// is refused whole, never applied in part.
const MaxBatchOps = 256

// MaxBatchReads bounds a batch's Reads, which MaxBatchOps does not count.
const MaxBatchReads = 64

// MaxKeyBytes and MaxValueBytes bound one row. They are far above what relay
// writes; they exist so a bug cannot grow a row without limit.
const (
	MaxKeyBytes   = 1024
	MaxValueBytes = 4 << 20
)

// TimerTag is the first byte of every timer row key. The 8 bytes after it are
// the timer's due time in Unix milliseconds, big-endian, so the first timer
// key of a partition in byte order is its earliest, and 2 bytes of kind
// follow. Apply keeps each bucket's due index equal to that earliest due
// time and refuses to put a timer key shorter than MinTimerKey; this is the
// only row layout the store knows.
const (
	TimerTag    byte = 't'
	MinTimerKey      = 1 + 8 + 2
)

// RegistryTag is the first byte of every row key that registers its
// partition: a partition is registered, and listed by its bucket's Registry,
// while it holds at least one row whose key starts with it. Apply keeps the
// registry from the partition's rows in the same atomic step as the write
// that adds the first such row or deletes the last, so the two never
// disagree. The outbox's endpoint rows carry it, so a namespace is
// registered while it has an endpoint; the store knows nothing else of them.
const RegistryTag byte = 'e'

// UnorderedTag is the first byte of every row key the store keeps in no
// order: such a row is read and guarded by its key like any other, but Scan
// does not list it, and ScanUnordered pages through these rows instead. An
// ordered row pays for its key a second time in the order index, which on
// Redis is about a hundred bytes a row; the outbox's seen rows, one per
// accepted outcome and only ever read by reservation id or swept, carry it.
// A row of this class put before the store kept it unordered stays listed
// by Scan until it is deleted.
const UnorderedTag byte = 's'

// BlockTag is the first byte of the row keys the store orders by block: a
// key of BlockKeyBytes starting with it (the tag and an 8-byte big-endian
// number, as the outbox's log rows are) shares its place in the order
// index with the keys of the 63 numbers beside it, those that differ from
// it only in the low six bits of the last byte. Scan lists such rows in
// byte order like any other, and Get and the preconditions read them by
// key; only their index costs a sixty-fourth. Apply refuses a write of a
// key with the tag and another length.
const (
	BlockTag      byte = 'l'
	BlockKeyBytes int  = 9
)

// validNamespace reports whether s matches [a-z0-9][a-z0-9_-]{0,62}. By
// hand rather than with a regexp: every request validates its namespace
// several times, and the regexp was 4 % of a single-outcome ingest's CPU.
func validNamespace(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// Errors callers branch on.
var (
	// ErrBatchTooLarge: more than MaxBatchOps operations. Nothing was written.
	ErrBatchTooLarge = errors.New("store: batch exceeds 256 operations")
	// ErrInvalidBatch: a malformed operation (empty or oversized key or value,
	// unknown kind). Nothing was written.
	ErrInvalidBatch = errors.New("store: invalid batch")
	// ErrInvalidPartition: the namespace name is not a valid partition.
	ErrInvalidPartition = errors.New("store: invalid partition")
	// ErrCorrupt: a row does not decode. Returned by decoders above the
	// store, and by Apply for a counter row that an Add cannot read; then
	// nothing was written.
	ErrCorrupt = errors.New("store: corrupt row")
	// ErrCounterRange: an Add would take a counter below 0 (one not
	// saturating) or above MaxCounter, or found one above MaxCounter.
	// Nothing was written.
	ErrCounterRange = errors.New("store: counter out of range")
	// ErrUnavailable: the store is unreachable or refusing writes for now
	// (restarting, failing over, loading its data, full); retry. Stores wrap
	// it around the cause. A batch refused with it wrote nothing; a call
	// whose connection broke after sending may have committed, as the
	// NamespaceStore contract allows, and a retry is safe.
	ErrUnavailable = errors.New("store: unreachable or refusing writes for now")
)

// Partition names one namespace's rows, the unit of atomicity.
type Partition struct {
	Namespace string
}

// Validate reports whether p names a valid namespace.
func (p Partition) Validate() error {
	if !validNamespace(p.Namespace) {
		return fmt.Errorf("%w: namespace %q must match [a-z0-9][a-z0-9_-]{0,62}", ErrInvalidPartition, p.Namespace)
	}
	return nil
}

func (p Partition) String() string { return p.Namespace }

// Key is a row key, compared as raw bytes.
type Key string

// Value is a row value. A present row may have an empty value.
type Value []byte

// Cursor marks a position in a scan: the last key a page returned. It is
// opaque to callers, who may persist its bytes and restore it.
type Cursor struct {
	after Key
}

// NewCursor restores a cursor from the bytes of Cursor.Bytes.
func NewCursor(b []byte) *Cursor { return &Cursor{after: Key(b)} }

// Bytes is the cursor's persistent form.
func (c *Cursor) Bytes() []byte { return []byte(c.after) }

// After is the key the cursor points past. Stores use it; callers should not.
func (c *Cursor) After() Key { return c.after }

// CursorAfter is the cursor that resumes just after key. Stores build page
// cursors with it.
func CursorAfter(key Key) *Cursor { return &Cursor{after: key} }

// Row is one row as read by GetMany.
type Row struct {
	Value Value
	Found bool
}

// Entry is one row of a scan page.
type Entry struct {
	Key   Key
	Value Value
}

// Page is one page of a scan. Next is nil when the range holds no key after
// the page's last one.
type Page struct {
	Entries []Entry
	Next    *Cursor
}

// PreconditionKind says what a precondition requires of its key.
type PreconditionKind uint8

const (
	// Equals requires the row to exist with exactly the given value.
	Equals PreconditionKind = iota + 1
	// Absent requires the row not to exist.
	Absent
	// RangeEquals requires the row to exist and to hold the given bytes at
	// Offset: a guard on the part of a shared row one writer owns (see
	// Batch.PutRange), which other writers' bytes do not fail.
	RangeEquals
)

// Precondition is checked before any write of its batch.
type Precondition struct {
	Kind  PreconditionKind
	Key   Key
	Value Value
	// Offset is where a RangeEquals's bytes start in its row.
	Offset int
}

// WriteKind says what a write does to its key.
type WriteKind uint8

const (
	// Put sets the row to the value, creating it if needed.
	Put WriteKind = iota + 1
	// Delete removes the row; deleting an absent row is not an error.
	Delete
	// Add adds signed deltas to the counters of a row (see Batch.Add).
	Add
	// PutRange overwrites bytes of a present row in place (see
	// Batch.PutRange).
	PutRange
)

// MaxRangeBytes bounds the bytes one PutRange overwrites: it is for a
// field of a row, not for rewriting the row.
const MaxRangeBytes = 256

// Bounds of an Add. Counters stop at 2^53-1, the largest integer a Redis
// script computes exactly.
const (
	MaxCounters      = 8
	MaxCounterHeader = 16
	MaxCounter       = 1<<53 - 1
)

// Write is one change in a batch. Writes apply in order.
type Write struct {
	Kind WriteKind
	Key  Key
	// Value is a Put's row, an Add's row header, or the bytes a PutRange
	// writes at Offset.
	Value Value
	// Offset is where a PutRange's bytes start in its row.
	Offset int
	// Deltas are an Add's, one per counter of the row.
	Deltas []int64
	// Saturating marks an Add's counters that stop at 0: with bit i set,
	// counter i taken below 0 becomes 0 rather than refusing the batch.
	// A gauge saturates, so a drift in it never blocks the batch; a count
	// whose underflow means a bug refuses.
	Saturating uint8
}

// Batch is applied all or nothing: every precondition is checked before the
// first write, and a failing one leaves the partition unchanged.
type Batch struct {
	Preconditions []Precondition
	Writes        []Write
	// Settles marks a settling batch: one that acknowledges or deletes, or
	// rewrites rows in place (PutRange), settling what the store holds
	// rather than taking in more. It still runs on a Redis at maxmemory, so
	// a full store can deliver and shrink; a batch that grows the store
	// (ingest) leaves it unset and is refused whole when memory is full.
	Settles bool
	// Answered marks a batch whose commit its caller reports to someone: an
	// operator's change. A store that answers a growing batch only once it
	// is replicated (redisstore's Durability) answers this one so too, even
	// when it Settles: a lost acknowledgement only redelivers, but a lost
	// erasure or endpoint delete brings back what an operator was told is
	// gone. A store with no such policy ignores it.
	Answered bool
	// Reads are rows to read once the writes are applied, in the same
	// atomic step: a committed Apply returns them in Result.Rows, as the
	// batch left them. A writer that needs a row after its batch so saves
	// the round trip of reading it, and reads no later writer's change.
	Reads []Key
}

// RequireEquals adds a precondition that key holds exactly value.
func (b *Batch) RequireEquals(key Key, value Value) {
	b.Preconditions = append(b.Preconditions, Precondition{Kind: Equals, Key: key, Value: value})
}

// RequireAbsent adds a precondition that key does not exist.
func (b *Batch) RequireAbsent(key Key) {
	b.Preconditions = append(b.Preconditions, Precondition{Kind: Absent, Key: key})
}

// RequireRange adds a precondition that key exists and holds bytes at
// offset. It compares 1 to MaxRangeBytes bytes, of a row that is neither a
// timer row nor a registering row, as a PutRange writes them.
func (b *Batch) RequireRange(key Key, offset int, bytes Value) {
	b.Preconditions = append(b.Preconditions, Precondition{Kind: RangeEquals, Key: key, Value: bytes, Offset: offset})
}

// Guard requires key to be as last read: absent when found is false, else
// equal to value. It is the precondition of a read-modify-write.
func (b *Batch) Guard(key Key, value Value, found bool) {
	if found {
		b.RequireEquals(key, value)
	} else {
		b.RequireAbsent(key)
	}
}

// Put adds a write that sets key to value.
func (b *Batch) Put(key Key, value Value) {
	b.Writes = append(b.Writes, Write{Kind: Put, Key: key, Value: value})
}

// Delete adds a write that removes key.
func (b *Batch) Delete(key Key) {
	b.Writes = append(b.Writes, Write{Kind: Delete, Key: key})
}

// Add adds a write that adds deltas[i] to counter i of key's row, laid out
// as header followed by one 8-byte big-endian unsigned counter per delta; an
// absent row counts as header and zeros. It reads the row as the batch
// applies, so a concurrent writer of other counts does not fail it, as an
// Equals guard on the row would. The whole batch is refused, before any
// write, when the present row has another layout (ErrCorrupt) or a counter
// would leave 0..MaxCounter (ErrCounterRange; see AddSaturating for one
// that stops at 0 instead). The key takes no other write
// in the batch, and is not a timer row.
//
// An add is not idempotent: a batch resent after a lost reply must carry a
// precondition its own first run falsifies (NamespaceStore).
func (b *Batch) Add(key Key, header Value, deltas ...int64) {
	b.Writes = append(b.Writes, Write{Kind: Add, Key: key, Value: header, Deltas: deltas})
}

// PutRange adds a write that overwrites bytes [offset, offset+len(bytes))
// of key's row with bytes; the row's length never changes. Like Add, it
// reads the row as the batch applies, so a concurrent batch writing other
// bytes of the row does not fail it: writers that each own a byte range of
// a shared row need no guard on the whole value. The whole batch is
// refused, before any write, when the row is absent or shorter than
// offset+len(bytes) (ErrCorrupt). It writes 1 to MaxRangeBytes bytes; the
// key is not a timer row and does not start with RegistryTag, whose rows
// the store keeps its indexes from, and takes no Put, Delete or Add in the
// batch. Several PutRanges of one key apply in order.
//
// Rewriting the same bytes again leaves the same row, so a resent PutRange
// is harmless on its own. It never grows the store, so a settling batch may
// carry it.
func (b *Batch) PutRange(key Key, offset int, bytes Value) {
	b.Writes = append(b.Writes, Write{Kind: PutRange, Key: key, Value: bytes, Offset: offset})
}

// AddSaturating is Add, except that each counter whose bit is set in
// saturating (bit i for counter i) stops at 0 when taken below it, rather
// than refusing the batch. Such a counter still refuses to pass MaxCounter.
func (b *Batch) AddSaturating(key Key, header Value, saturating uint8, deltas ...int64) {
	b.Writes = append(b.Writes, Write{Kind: Add, Key: key, Value: header, Deltas: deltas, Saturating: saturating})
}

// Ops is the number of operations the batch holds, as counted by MaxBatchOps.
func (b *Batch) Ops() int { return len(b.Preconditions) + len(b.Writes) }

// Validate reports a batch that no store may apply. It checks shapes only.
func (b *Batch) Validate() error {
	if n := b.Ops(); n > MaxBatchOps {
		return fmt.Errorf("%w: %d operations", ErrBatchTooLarge, n)
	}
	if n := len(b.Reads); n > MaxBatchReads {
		return fmt.Errorf("%w: %d reads", ErrBatchTooLarge, n)
	}
	for i, key := range b.Reads {
		if err := checkRow(key, nil); err != nil {
			return fmt.Errorf("%w: read %d: %v", ErrInvalidBatch, i, err)
		}
	}
	for i, pc := range b.Preconditions {
		if pc.Kind != Equals && pc.Kind != Absent && pc.Kind != RangeEquals {
			return fmt.Errorf("%w: precondition %d has unknown kind %d", ErrInvalidBatch, i, pc.Kind)
		}
		if err := checkRow(pc.Key, pc.Value); err != nil {
			return fmt.Errorf("%w: precondition %d: %v", ErrInvalidBatch, i, err)
		}
		if pc.Kind == RangeEquals {
			if err := checkRange(pc.Key, pc.Offset, pc.Value); err != nil {
				return fmt.Errorf("%w: precondition %d: %v", ErrInvalidBatch, i, err)
			}
		} else if pc.Offset != 0 {
			return fmt.Errorf("%w: precondition %d: only a range carries an offset", ErrInvalidBatch, i)
		}
		if pc.Kind == Absent && len(pc.Value) > 0 {
			return fmt.Errorf("%w: precondition %d: absent carries a value", ErrInvalidBatch, i)
		}
	}
	var adds, ranges map[Key]int
	for i, w := range b.Writes {
		if w.Kind != Put && w.Kind != Delete && w.Kind != Add && w.Kind != PutRange {
			return fmt.Errorf("%w: write %d has unknown kind %d", ErrInvalidBatch, i, w.Kind)
		}
		if err := checkRow(w.Key, w.Value); err != nil {
			return fmt.Errorf("%w: write %d: %v", ErrInvalidBatch, i, err)
		}
		if w.Key[0] == BlockTag && len(w.Key) != BlockKeyBytes {
			return fmt.Errorf("%w: write %d: a key with the block tag of %d bytes, want %d", ErrInvalidBatch, i, len(w.Key), BlockKeyBytes)
		}
		if w.Kind == Delete && len(w.Value) > 0 {
			return fmt.Errorf("%w: write %d: delete carries a value", ErrInvalidBatch, i)
		}
		if w.Kind != PutRange && w.Offset != 0 {
			return fmt.Errorf("%w: write %d: only a put-range carries an offset", ErrInvalidBatch, i)
		}
		if w.Kind == PutRange {
			if len(w.Deltas) > 0 || w.Saturating != 0 {
				return fmt.Errorf("%w: write %d: only an add carries deltas", ErrInvalidBatch, i)
			}
			if err := checkRange(w.Key, w.Offset, w.Value); err != nil {
				return fmt.Errorf("%w: write %d: %v", ErrInvalidBatch, i, err)
			}
			if ranges == nil {
				ranges = map[Key]int{}
			}
			if _, ok := ranges[w.Key]; !ok {
				ranges[w.Key] = i
			}
			continue
		}
		if w.Kind != Add {
			if len(w.Deltas) > 0 || w.Saturating != 0 {
				return fmt.Errorf("%w: write %d: only an add carries deltas", ErrInvalidBatch, i)
			}
			continue
		}
		if err := checkAdd(w); err != nil {
			return fmt.Errorf("%w: write %d: %v", ErrInvalidBatch, i, err)
		}
		if adds == nil {
			adds = map[Key]int{}
		}
		adds[w.Key] = i
	}
	if adds != nil {
		for i, w := range b.Writes {
			if j, ok := adds[w.Key]; ok && j != i {
				return fmt.Errorf("%w: writes %d and %d: an added row takes no other write", ErrInvalidBatch, min(i, j), max(i, j))
			}
		}
	}
	if ranges != nil {
		for i, w := range b.Writes {
			if j, ok := ranges[w.Key]; ok && w.Kind != PutRange {
				return fmt.Errorf("%w: writes %d and %d: a put-range row takes no put, delete or add", ErrInvalidBatch, min(i, j), max(i, j))
			}
		}
	}
	return nil
}

// checkRange checks the bytes a PutRange writes or a RangeEquals compares.
func checkRange(key Key, offset int, bytes Value) error {
	switch {
	case key[0] == TimerTag:
		return errors.New("range of a timer row")
	case key[0] == RegistryTag:
		return errors.New("range of a registering row")
	case len(bytes) == 0 || len(bytes) > MaxRangeBytes:
		return fmt.Errorf("range of %d bytes, want 1 to %d", len(bytes), MaxRangeBytes)
	case offset < 0 || offset > MaxValueBytes-len(bytes):
		return fmt.Errorf("range at offset %d of %d bytes leaves 0..%d", offset, len(bytes), MaxValueBytes)
	}
	return nil
}

func checkAdd(w Write) error {
	switch {
	case w.Key[0] == TimerTag:
		return errors.New("add to a timer row")
	case len(w.Value) > MaxCounterHeader:
		return fmt.Errorf("add header of %d bytes exceeds %d", len(w.Value), MaxCounterHeader)
	case len(w.Deltas) == 0 || len(w.Deltas) > MaxCounters:
		return fmt.Errorf("add of %d counters, want 1 to %d", len(w.Deltas), MaxCounters)
	case w.Saturating>>len(w.Deltas) != 0:
		return fmt.Errorf("add saturates a counter beyond its %d", len(w.Deltas))
	}
	for _, d := range w.Deltas {
		if d < -MaxCounter || d > MaxCounter {
			return fmt.Errorf("add delta beyond ±%d", int64(MaxCounter))
		}
	}
	return nil
}

func checkRow(key Key, value Value) error {
	switch {
	case len(key) == 0:
		return errors.New("empty key")
	case len(key) > MaxKeyBytes:
		return fmt.Errorf("key of %d bytes exceeds %d", len(key), MaxKeyBytes)
	case len(value) > MaxValueBytes:
		return fmt.Errorf("value of %d bytes exceeds %d", len(value), MaxValueBytes)
	}
	return nil
}

// Result is the outcome of Apply.
type Result struct {
	// Committed reports that every write was applied.
	Committed bool
	// Failed is the index of the first failing precondition when the batch
	// was not committed; nothing was written.
	Failed int
	// Rows are the batch's Reads as the committed batch left them, one per
	// key, in order; nil when it was not committed.
	Rows []Row
}

// NamespaceStore is the storage of every partition.
//
// A network error may make a client retry Apply, and so run a batch twice.
// Every batch must therefore be idempotent or guarded by a precondition its
// own first run falsifies.
type NamespaceStore interface {
	// Get returns the row's value and whether it exists.
	Get(ctx context.Context, p Partition, key Key) (Value, bool, error)
	// GetMany reads several rows at one instant, in one round trip. It
	// returns one Row per key, in order; at most MaxBatchOps keys.
	GetMany(ctx context.Context, p Partition, keys []Key) ([]Row, error)
	// Scan returns up to limit rows with keys in [start, end) in byte order,
	// strictly after the cursor when one is given.
	Scan(ctx context.Context, p Partition, start, end Key, after *Cursor, limit int) (Page, error)
	// ScanUnordered returns a page of the rows whose keys start with
	// UnorderedTag, in no order, resuming after the cursor of an earlier
	// page when one is given (a Scan's cursor is refused). A walk from no
	// cursor until Next is nil returns every such row present for the
	// whole walk at least once; a row written or deleted during it may or
	// may not come, and a row may come twice. limit is a hint: a page may
	// hold more rows (a small partition answers whole) or none, with a
	// Next all the same.
	ScanUnordered(ctx context.Context, p Partition, after *Cursor, limit int) (Page, error)
	// Apply applies the batch atomically, or reports the first failing
	// precondition and writes nothing.
	Apply(ctx context.Context, p Partition, b Batch) (Result, error)
}

// DueIndex finds partitions with due timers. Each bucket of namespaces keeps
// one index, maintained by Apply from the partitions' timer rows.
type DueIndex interface {
	// Buckets is the number of buckets, fixed for the life of a keyspace.
	Buckets() int
	// BucketOf is the bucket that holds the partition.
	BucketOf(p Partition) int
	// Due returns up to limit partitions of the bucket whose earliest timer is
	// due at or before upToMs, earliest first.
	Due(ctx context.Context, bucket int, upToMs int64, limit int) ([]DuePartition, error)
}

// Registry lists the registered partitions (see RegistryTag) of each
// bucket. ListRegistered pages through every bucket's.
type Registry interface {
	// Buckets and BucketOf are DueIndex's: a partition is registered in the
	// bucket that holds its due index entry.
	Buckets() int
	BucketOf(p Partition) int
	// Registered returns up to limit registered partitions of the bucket
	// whose names sort strictly after after ("" for the first), in byte
	// order, and whether the bucket holds more after them.
	Registered(ctx context.Context, bucket int, after string, limit int) (parts []Partition, more bool, err error)
	// CountRegistered counts the registered partitions of every bucket. It
	// reads the buckets one by one rather than at one instant: a partition
	// registered or unregistered meanwhile may be counted or not, and every
	// partition registered throughout is counted once.
	CountRegistered(ctx context.Context) (int, error)
}

// DuePartition is one entry of a bucket's due index.
type DuePartition struct {
	Partition Partition
	DueAtMs   int64
}
