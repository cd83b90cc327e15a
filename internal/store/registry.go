package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
)

// Bounds of one ListRegistered page.
const (
	// MaxRegistryPage is the most partitions one page returns; a larger
	// limit is clamped to it.
	MaxRegistryPage = 1000
	// RegistryBucketsPerPage is the most buckets one page reads, so that
	// a page costs a bounded number of round trips however sparse the
	// buckets are. A page that reached it may hold fewer than its limit
	// and still have a next cursor.
	RegistryBucketsPerPage = 64
)

// ErrInvalidCursor: the bytes are not a registry cursor of this keyspace.
var ErrInvalidCursor = errors.New("store: invalid registry cursor")

// RegistryCursor is a position in the walk of every bucket's registry. The
// walk's order is bucket by bucket, and by name in byte order within a
// bucket: each page then reads a bounded range of a few buckets, where a
// global name order would have to merge every bucket for every page. The
// zero cursor is the start of the walk.
type RegistryCursor struct {
	// Bucket is the bucket the walk resumes in.
	Bucket int
	// After is the last partition of Bucket a page returned, "" when the
	// walk resumes at the bucket's first.
	After string
}

// Bytes is the cursor's persistent form: the bucket as a uvarint, then the
// name.
func (c RegistryCursor) Bytes() []byte {
	return append(binary.AppendUvarint(nil, uint64(c.Bucket)), c.After...)
}

// ParseRegistryCursor restores a cursor from the bytes of
// RegistryCursor.Bytes. It refuses, with ErrInvalidCursor, bytes that no
// page of r's keyspace could have given: a bucket out of range, a name that
// is not a namespace, or one that is not of the bucket.
func ParseRegistryCursor(r Registry, b []byte) (RegistryCursor, error) {
	bucket, n := binary.Uvarint(b)
	if n <= 0 || n != len(binary.AppendUvarint(nil, bucket)) {
		return RegistryCursor{}, fmt.Errorf("%w: no bucket", ErrInvalidCursor)
	}
	if bucket >= uint64(r.Buckets()) {
		return RegistryCursor{}, fmt.Errorf("%w: bucket out of range", ErrInvalidCursor)
	}
	c := RegistryCursor{Bucket: int(bucket), After: string(b[n:])}
	if c.After != "" {
		p := Partition{Namespace: c.After}
		if p.Validate() != nil || r.BucketOf(p) != c.Bucket {
			return RegistryCursor{}, fmt.Errorf("%w: not a namespace of its bucket", ErrInvalidCursor)
		}
	}
	return c, nil
}

// RegistryPage is one page of ListRegistered. Next is nil at the end of the
// walk.
type RegistryPage struct {
	Partitions []Partition
	Next       *RegistryCursor
}

// ListRegistered returns up to limit registered partitions from the cursor
// on, in the walk's order, reading at most RegistryBucketsPerPage buckets,
// one round trip each. A partition registered for the whole walk is
// returned exactly once; one registered or unregistered during it is
// returned at most once, when its position is still ahead of the cursor.
func ListRegistered(ctx context.Context, r Registry, from RegistryCursor, limit int) (RegistryPage, error) {
	return listWith(ctx, r.Buckets(), from, limit, func(b int, after string, n int) ([]Partition, bool, error) {
		return r.Registered(ctx, b, after, n)
	})
}

// listWith walks buckets' sets with list, as ListRegistered says.
func listWith(_ context.Context, buckets int, from RegistryCursor, limit int, list func(bucket int, after string, limit int) ([]Partition, bool, error)) (RegistryPage, error) {
	if limit < 1 {
		return RegistryPage{}, fmt.Errorf("list registered: limit %d must be at least 1", limit)
	}
	if from.Bucket < 0 || from.Bucket >= buckets {
		return RegistryPage{}, fmt.Errorf("%w: bucket out of range", ErrInvalidCursor)
	}
	limit = min(limit, MaxRegistryPage)
	var page RegistryPage
	b, after := from.Bucket, from.After
	for read := 0; b < buckets && len(page.Partitions) < limit && read < RegistryBucketsPerPage; read++ {
		parts, more, err := list(b, after, limit-len(page.Partitions))
		if err != nil {
			return RegistryPage{}, err
		}
		page.Partitions = append(page.Partitions, parts...)
		if more && len(parts) > 0 {
			page.Next = &RegistryCursor{Bucket: b, After: parts[len(parts)-1].Namespace}
			return page, nil
		}
		b, after = b+1, ""
	}
	if b < buckets {
		page.Next = &RegistryCursor{Bucket: b}
	}
	return page, nil
}
