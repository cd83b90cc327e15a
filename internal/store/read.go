package store

import (
	"context"
	"fmt"
)

// Read is one read of ReadMany: the rows of Keys when Keys is not nil (at
// most MaxBatchOps of them), else a Scan of [Start, End) after After, of at
// most Limit rows.
type Read struct {
	Keys       []Key
	Start, End Key
	After      *Cursor
	Limit      int
}

// ReadResult answers one Read: Rows for keys, Page for a scan.
type ReadResult struct {
	Rows []Row
	Page Page
}

// MultiReader is a store that does several reads of one partition in one
// round trip, from one instant.
type MultiReader interface {
	ReadMany(ctx context.Context, p Partition, reads []Read) ([]ReadResult, error)
}

// ReadMany does the reads with st's ReadMany when it has one, else with one
// GetMany or Scan each. Either way a plan built from the results must guard
// what it read: reads are consistent with each other only on a MultiReader.
func ReadMany(ctx context.Context, st NamespaceStore, p Partition, reads []Read) ([]ReadResult, error) {
	if mr, ok := st.(MultiReader); ok {
		return mr.ReadMany(ctx, p, reads)
	}
	out := make([]ReadResult, len(reads))
	for i, r := range reads {
		var err error
		if r.Keys != nil {
			out[i].Rows, err = st.GetMany(ctx, p, r.Keys)
			if err == nil && out[i].Rows == nil {
				out[i].Rows = []Row{}
			}
		} else {
			out[i].Page, err = st.Scan(ctx, p, r.Start, r.End, r.After, r.Limit)
		}
		if err != nil {
			return nil, fmt.Errorf("read %d of %s: %w", i, p, err)
		}
	}
	return out, nil
}
