package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/hookrelay/relay/internal/store"
)

// ReadMany does every read in one script call: one round trip, from one
// instant. It has the limits of GetMany and Scan.
func (s *Store) ReadMany(ctx context.Context, p store.Partition, reads []store.Read) ([]store.ReadResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	args := []any{blockTag, strconv.Itoa(len(reads))}
	// empty marks scans of an empty range, answered without asking Redis.
	empty := make([]bool, len(reads))
	for i, r := range reads {
		if r.Keys != nil {
			if len(r.Keys) > store.MaxBatchOps {
				return nil, fmt.Errorf("read rows of %s: at most %d at once", p, store.MaxBatchOps)
			}
			args = append(args, "g", strconv.Itoa(len(r.Keys)))
			for _, k := range r.Keys {
				args = append(args, string(k))
			}
			continue
		}
		if r.Limit < 1 {
			return nil, fmt.Errorf("scan %s: limit %d must be at least 1", p, r.Limit)
		}
		lower := "[" + string(r.Start)
		if r.After != nil && r.After.After() >= r.Start {
			lower = "(" + string(r.After.After())
		}
		if r.End <= r.Start || (r.After != nil && r.After.After() >= r.End) {
			empty[i] = true
			// A range ZRANGEBYLEX finds empty keeps the reply in step.
			lower = "(" + string(r.End)
		}
		args = append(args, "s", lower, "("+string(r.End), strconv.Itoa(min(r.Limit, MaxScanLimit)))
	}
	keys := s.partitionKeys(p)
	res, err := s.scripts.read.run(ctx, s.client, keys[:2], args...)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, classify(ctx, err))
	}
	replies, ok := res.([]any)
	if !ok || len(replies) != len(reads) {
		return nil, fmt.Errorf("read %s: unexpected reply of type %T", p, res)
	}
	out := make([]store.ReadResult, len(reads))
	for i, r := range reads {
		if r.Keys != nil {
			if out[i].Rows, err = decodeRows(replies[i], len(r.Keys)); err != nil {
				return nil, fmt.Errorf("read rows of %s: %w", p, err)
			}
			continue
		}
		if empty[i] {
			continue
		}
		if out[i].Page, err = decodePage(replies[i]); err != nil {
			return nil, fmt.Errorf("scan %s: %w", p, err)
		}
	}
	return out, nil
}

// decodeRows decodes an HMGET reply of n values.
func decodeRows(reply any, n int) ([]store.Row, error) {
	vals, ok := reply.([]any)
	if !ok || len(vals) != n {
		return nil, fmt.Errorf("unexpected reply of type %T for %d keys", reply, n)
	}
	rows := make([]store.Row, n)
	for i, v := range vals {
		switch v := v.(type) {
		case nil:
		case string:
			rows[i] = store.Row{Value: store.Value(v), Found: true}
		default:
			return nil, fmt.Errorf("unexpected value of type %T", v)
		}
	}
	return rows, nil
}
