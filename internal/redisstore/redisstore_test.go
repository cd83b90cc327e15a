package redisstore_test

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/store/storetest"
)

var acme = store.Partition{Namespace: "acme"}

var timerKey = storetest.TimerKey

// eachBackend runs fn on every backend as a parallel subtest.
func eachBackend(t *testing.T, fn func(t *testing.T, s *redisstore.Store)) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		fn(t, b.New(t))
	})
}

func mustCommit(t *testing.T, s *redisstore.Store, p store.Partition, b store.Batch) {
	t.Helper()
	r, err := s.Apply(t.Context(), p, b)
	if err != nil {
		t.Fatalf("apply on %s: %v", p, err)
	}
	if !r.Committed {
		t.Fatalf("apply on %s: precondition %d failed", p, r.Failed)
	}
}

// wantEmpty checks that p has no row, no order entry, no due entry and no
// registry entry.
func wantEmpty(t *testing.T, s *redisstore.Store, p store.Partition) {
	t.Helper()
	keys := s.PartitionKeys(p)
	c := s.Client()
	ctx := t.Context()
	if n := c.HLen(ctx, keys[0]).Val(); n != 0 {
		t.Fatalf("%s holds %d rows, want none", p, n)
	}
	if n := c.ZCard(ctx, keys[1]).Val(); n != 0 {
		t.Fatalf("%s orders %d keys, want none", p, n)
	}
	if err := c.ZScore(ctx, keys[2], p.Namespace).Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("%s is in the due index (%v), want absent", p, err)
	}
	if err := c.ZScore(ctx, keys[3], p.Namespace).Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("%s is in the registry (%v), want absent", p, err)
	}
}

func TestScriptRefusesMalformedArgumentsBeforeWriting(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *redisstore.Store) {
		keys := s.PartitionKeys(acme)
		ctx := t.Context()
		for _, tc := range []struct {
			name string
			argv []any
		}{
			{"one operation too many", append([]any{"acme", "teslbfo", "", strings.Repeat("p", store.MaxBatchOps+1)}, slices.Repeat([]any{"k", "v"}, store.MaxBatchOps+1)...)},
			{"argument count short", []any{"acme", "teslbfo", "", "pp", "k1", "v"}},
			{"argument count long", []any{"acme", "teslbfo", "", "p", "k1", "v", "extra"}},
			{"reads fewer than counted", []any{"acme", "teslbfo", "", "p", "k1", "v", "2", "k1"}},
			{"reads more than counted", []any{"acme", "teslbfo", "", "p", "k1", "v", "1", "k1", "k2"}},
			{"a read count of 0", []any{"acme", "teslbfo", "", "p", "k1", "v", "0"}},
			{"a read count of 65", append([]any{"acme", "teslbfo", "", "p", "k1", "v", "65"}, slices.Repeat([]any{"k"}, 65)...)},
			{"a read count not in decimal", []any{"acme", "teslbfo", "", "p", "k1", "v", "0x1", "k1"}},
			{"an empty read key", []any{"acme", "teslbfo", "", "p", "k1", "v", "1", ""}},
			{"unknown kind in the last write", []any{"acme", "teslbfo", "", "px", "k1", "v", "k2", "v"}},
			{"unknown precondition kind", []any{"acme", "teslbfo", "p", "p", "k0", "", "k1", "v"}},
			{"empty precondition key", []any{"acme", "teslbfo", "a", "p", "", "", "k1", "v"}},
			{"empty key in the last write", []any{"acme", "teslbfo", "", "pd", "k1", "v", "", ""}},
			{"row tags of one byte", []any{"acme", "t", "", "p", "k1", "v"}},
			{"row tags of eight bytes", []any{"acme", "teeslbfo", "", "p", "k1", "v"}},
			{"counter add without counters", []any{"acme", "teslbfo", "", "pc", "k1", "v", "c", "\x00"}},
			{"counter add of a partial counter", []any{"acme", "teslbfo", "", "pc", "k1", "v", "c", "\x00+\x00\x00\x00\x00\x00\x01"}},
			{"counter add of a counter and a half", []any{"acme", "teslbfo", "", "pc", "k1", "v", "c", "\x00+\x00\x00\x00\x00\x00\x00\x01+\x00\x00\x00"}},
			{"counter add of an unsigned delta", []any{"acme", "teslbfo", "", "pc", "k1", "v", "c", "\x00 \x00\x00\x00\x00\x00\x00\x01"}},
			{"counter add of another sign", []any{"acme", "teslbfo", "", "pc", "k1", "v", "c", "\x00*\x00\x00\x00\x00\x00\x00\x00"}},
			{"saturating counter add of 2^53", []any{"acme", "teslbfo", "", "pc", "k1", "v", "c", "\x00~\x20\x00\x00\x00\x00\x00\x00"}},
			{"counter add of 2^53", []any{"acme", "teslbfo", "", "pc", "k1", "v", "c", "\x00+\x20\x00\x00\x00\x00\x00\x00"}},
			{"counter add header longer than the value", []any{"acme", "teslbfo", "", "pc", "k1", "v", "c", "\x09+\x00\x00\x00\x00\x00\x00\x01"}},
			{"counter add of nine counters", []any{"acme", "teslbfo", "", "pc", "k1", "v", "c", "\x00" + strings.Repeat("+\x00\x00\x00\x00\x00\x00\x01", 9)}},
			{"counter add to a timer row", []any{"acme", "teslbfo", "", "pc", "k1", "v", "t\x00\x00\x00\x00\x00\x00\x00\x01\x00\x08", "\x00+\x00\x00\x00\x00\x00\x00\x01"}},
			{"counter add beside a put of its row", []any{"acme", "teslbfo", "", "pc", "c", "v", "c", "\x00+\x00\x00\x00\x00\x00\x00\x01"}},
			{"two counter adds of one row", []any{"acme", "teslbfo", "", "cc", "c", "\x00+\x00\x00\x00\x00\x00\x00\x01", "c", "\x00+\x00\x00\x00\x00\x00\x00\x01"}},
		} {
			err := s.Client().Eval(ctx, redisstore.ApplyBody, keys, tc.argv...).Err()
			if err == nil || !strings.Contains(err.Error(), "relay apply:") {
				t.Fatalf("%s: script answered %v, want a relay apply error", tc.name, err)
			}
			wantEmpty(t, s, acme)
		}
		// The same script commits a well-formed batch.
		res, err := s.Client().Eval(ctx, redisstore.ApplyBody, keys, "acme", "teslbfo", "a", "p", "k0", "", "k1", "v").Result()
		if err != nil || fmt.Sprint(res) != "[1]" {
			t.Fatalf("well-formed batch: %v, %v; want [1]", res, err)
		}
		res, err = s.Client().Eval(ctx, redisstore.ApplyBody, keys, "acme", "teslbfo", "", "c", "c", "\x01h-\x00\x00\x00\x00\x00\x00\x00+\x1f\xff\xff\xff\xff\xff\xff").Result()
		if err != nil || fmt.Sprint(res) != "[1]" {
			t.Fatalf("well-formed counter add: %v, %v; want [1]", res, err)
		}
		if v := s.Client().HGet(ctx, keys[0], "c").Val(); v != "h\x00\x00\x00\x00\x00\x00\x00\x00\x00\x1f\xff\xff\xff\xff\xff\xff" {
			t.Fatalf("counter row %q", v)
		}
	})
}

// apply.lua refuses a malformed put-range itself, before any write. Every
// row named is present and long enough, so only the shape check can refuse.
func TestScriptRefusesMalformedPutRangesBeforeWriting(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *redisstore.Store) {
		keys := s.PartitionKeys(acme)
		ctx := t.Context()
		timer := string(timerKey(5000, "ep"))
		var seed store.Batch
		seed.Put("r", store.Value("0123456789"))
		seed.Put(store.Key(timer), store.Value("0123456789"))
		seed.Put("ep", store.Value("0123456789"))
		mustCommit(t, s, acme, seed)
		before := s.Client().HGetAll(ctx, keys[0]).Val()
		one := "\x00\x00\x00\x01x"
		for _, tc := range []struct {
			name string
			argv []any
		}{
			{"put-range without its offset", []any{"acme", "teslbfo", "", "r", "r", "\x00\x00\x00"}},
			{"put-range of no bytes", []any{"acme", "teslbfo", "", "r", "r", "\x00\x00\x00\x01"}},
			{"put-range of 257 bytes", []any{"acme", "teslbfo", "", "r", "r", "\x00\x00\x00\x00" + strings.Repeat("x", 257)}},
			{"put-range past the largest row", []any{"acme", "teslbfo", "", "r", "r", "\x00\x40\x00\x00x"}},
			{"put-range of a timer row", []any{"acme", "teslbfo", "", "r", timer, one}},
			{"put-range of a registering row", []any{"acme", "teslbfo", "", "r", "ep", one}},
			{"put-range beside a put of its row", []any{"acme", "teslbfo", "", "pr", "r", "0123456789", "r", one}},
			{"put-range beside a delete of its row", []any{"acme", "teslbfo", "", "rd", "r", one, "r", ""}},
			{"put-range beside a counter add of its row", []any{"acme", "teslbfo", "", "rc", "r", one, "r", "\x00+\x00\x00\x00\x00\x00\x00\x01"}},
			{"range guard without its offset", []any{"acme", "teslbfo", "r", "", "r", "\x00\x00\x00"}},
			{"range guard of no bytes", []any{"acme", "teslbfo", "r", "", "r", "\x00\x00\x00\x01"}},
			{"range guard past the largest row", []any{"acme", "teslbfo", "r", "", "r", "\x00\x40\x00\x00x"}},
			{"range guard of a timer row", []any{"acme", "teslbfo", "r", "", timer, one}},
		} {
			err := s.Client().Eval(ctx, redisstore.ApplyBody, keys, tc.argv...).Err()
			if err == nil || !strings.Contains(err.Error(), "relay apply:") || strings.Contains(err.Error(), "too short") {
				t.Fatalf("%s: script answered %v, want a relay apply shape error", tc.name, err)
			}
			if after := s.Client().HGetAll(ctx, keys[0]).Val(); !maps.Equal(after, before) {
				t.Fatalf("%s: rows %q, want %q", tc.name, after, before)
			}
		}
		// The same script splices a well-formed put-range at its offset.
		res, err := s.Client().Eval(ctx, redisstore.ApplyBody, keys, "acme", "teslbfo", "", "rr", "r", "\x00\x00\x00\x08ab", "r", "\x00\x00\x00\x00Z").Result()
		if err != nil || fmt.Sprint(res) != "[1]" {
			t.Fatalf("well-formed put-range: %v, %v; want [1]", res, err)
		}
		if v := s.Client().HGet(ctx, keys[0], "r").Val(); v != "Z1234567ab" {
			t.Fatalf("ranged row %q", v)
		}
	})
}

func TestErrorsDoNotCarryValues(t *testing.T) {
	s := redistest.Miniredis(t)
	secret := store.Value("payload-secret-7f3a")
	var b store.Batch
	b.RequireEquals("k", secret)
	for i := range store.MaxBatchOps {
		b.Put(store.Key("k"+strconv.Itoa(i)), secret)
	}
	_, err := s.Apply(t.Context(), acme, b)
	if !errors.Is(err, store.ErrBatchTooLarge) {
		t.Fatalf("apply = %v, want ErrBatchTooLarge", err)
	}
	if strings.Contains(err.Error(), string(secret)) {
		t.Fatalf("error %q carries a row value", err)
	}
}

func TestShortTimerKeyIsRefused(t *testing.T) {
	s := redistest.Miniredis(t)
	// Starting with the timer tag: no due time, and a due time but no kind.
	for _, short := range []store.Key{"tiny", "t\x00\x00\x00\x00\x00\x00\x00\x01\x00"} {
		var b store.Batch
		b.Put("ok", nil)
		b.Put(short, store.Value("x"))
		_, err := s.Apply(t.Context(), acme, b)
		if !errors.Is(err, store.ErrInvalidBatch) {
			t.Fatalf("apply of %q = %v, want ErrInvalidBatch", short, err)
		}
		wantEmpty(t, s, acme)
		// The script itself refuses it too.
		keys := s.PartitionKeys(acme)
		if err := s.Client().Eval(t.Context(), redisstore.ApplyBody, keys, "acme", "teslbfo", "", "p", string(short), "x").Err(); err == nil ||
			!strings.Contains(err.Error(), "relay apply:") {
			t.Fatalf("script answered %v for %q, want a relay apply error", err, short)
		}
		wantEmpty(t, s, acme)
	}
	var b store.Batch
	// The script refuses a call with the wrong number of keys before writing.
	if err := s.Client().Eval(t.Context(), redisstore.ApplyBody, s.PartitionKeys(acme)[:2], "acme", "teslbfo", "", "p", "k", "v").Err(); err == nil {
		t.Fatal("apply.lua ran with two keys")
	}
	wantEmpty(t, s, acme)
	// Deleting such a key is harmless and allowed.
	b.Delete("tiny")
	mustCommit(t, s, acme, b)
}

func TestBucketCountIsFixedOnFirstUse(t *testing.T) {
	eachClient(t, func(t *testing.T, client redis.UniversalClient) {
		prefix := redistest.Prefix(t, client)
		ctx := t.Context()
		if _, err := redisstore.New(ctx, client, redisstore.Options{Prefix: prefix, Buckets: 64}); err != nil {
			t.Fatalf("first New: %v", err)
		}
		_, err := redisstore.New(ctx, client, redisstore.Options{Prefix: prefix, Buckets: 32})
		if !errors.Is(err, redisstore.ErrBucketMismatch) {
			t.Fatalf("New with 32 buckets after 64 = %v, want ErrBucketMismatch", err)
		}
		if msg := err.Error(); !strings.Contains(msg, "64") || !strings.Contains(msg, "32") {
			t.Fatalf("mismatch error %q does not name both counts", msg)
		}
		// The default is 64, so a store without options still opens.
		if _, err := redisstore.New(ctx, client, redisstore.Options{Prefix: prefix}); err != nil {
			t.Fatalf("New with the default bucket count: %v", err)
		}
	})
}

// A keyspace records its format version at first use; one that records
// another, or holds rows but records none, is refused with both versions
// named, and left as it was.
func TestFormatVersionIsRecordedAndChecked(t *testing.T) {
	eachClient(t, func(t *testing.T, client redis.UniversalClient) {
		prefix := redistest.Prefix(t, client)
		ctx := t.Context()
		s, err := redisstore.New(ctx, client, redisstore.Options{Prefix: prefix})
		if err != nil {
			t.Fatalf("first New: %v", err)
		}
		if got, err := client.Get(ctx, prefix+"format").Result(); err != nil || got != strconv.Itoa(redisstore.Format) {
			t.Fatalf("recorded format %q (%v), want %d", got, err, redisstore.Format)
		}
		var b store.Batch
		b.Put("row", store.Value("v"))
		mustCommit(t, s, acme, b)
		if _, err := redisstore.New(ctx, client, redisstore.Options{Prefix: prefix}); err != nil {
			t.Fatalf("New on a keyspace of this format: %v", err)
		}

		refused := func(set func(), wants ...string) {
			t.Helper()
			set()
			before, err := redistest.Dump(ctx, client, prefix)
			if err != nil {
				t.Fatal(err)
			}
			_, err = redisstore.New(ctx, client, redisstore.Options{Prefix: prefix})
			if !errors.Is(err, redisstore.ErrFormat) {
				t.Fatalf("New = %v, want ErrFormat", err)
			}
			for _, want := range wants {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			after, err := redistest.Dump(ctx, client, prefix)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(before, after) {
				t.Errorf("a refused New changed the keyspace:\n%v\n%v", before, after)
			}
		}
		refused(func() { client.Set(ctx, prefix+"format", "2", 0) }, `format "2"`, "format 1")
		refused(func() { client.Del(ctx, prefix+"format") }, "holds rows but records no format version", "format 1")
	})
}

func TestNewRefusesBadOptions(t *testing.T) {
	s := redistest.Miniredis(t)
	for _, opts := range []redisstore.Options{
		{Prefix: "relay:{x}:"},
		{Prefix: "relay}"},
		{Buckets: -1},
		{Buckets: redisstore.MaxBuckets + 1},
	} {
		if _, err := redisstore.New(t.Context(), s.Client(), opts); err == nil {
			t.Fatalf("New(%+v) succeeded, want an error", opts)
		}
	}
}

func TestKeyLayout(t *testing.T) {
	s, m := redistest.MiniredisServer(t, redisstore.Options{})
	var b store.Batch
	b.Put("row", nil)
	b.Put(timerKey(1000, "ep"), store.Value{0})
	b.Put(store.Key([]byte{store.SumTag, 'x'}), store.Value{1, 0, 0, 0, 0, 0, 0, 0, 2})
	b.Put(store.Key([]byte{store.FlagTags[0], 'x'}), nil)
	b.Put(store.Key([]byte{store.FlagTags[1], 'x'}), nil)
	mustCommit(t, s, acme, b)

	h := fnv.New32a()
	h.Write([]byte("acme"))
	bucket := int(h.Sum32() % 64)
	if got := s.BucketOf(acme); got != bucket {
		t.Fatalf("bucket of acme = %d, want FNV-1a %% 64 = %d", got, bucket)
	}
	tag := fmt.Sprintf("relay:{%d}", bucket)
	want := []string{"relay:buckets", "relay:format", "relay:totals", tag + ":due", tag + ":flag:1", tag + ":flag:2",
		tag + ":ns:acme:keys", tag + ":ns:acme:rows", tag + ":summed", tag + ":totals"}
	if got := m.Keys(); !slices.Equal(got, want) {
		t.Fatalf("redis keys %q, want %q", got, want)
	}
}

// An unordered row is in the values hash alone, which is the memory it
// saves.
func TestUnorderedRowsStayOutOfTheOrderIndex(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *redisstore.Store) {
		ctx := t.Context()
		keys := s.PartitionKeys(acme)
		fresh := "s" + "fresh"
		var b store.Batch
		b.Put(store.Key(fresh), store.Value("v"))
		b.Put("ordered", store.Value("v"))
		mustCommit(t, s, acme, b)
		if got := s.Client().ZRange(ctx, keys[1], 0, -1).Val(); !slices.Equal(got, []string{"ordered"}) {
			t.Fatalf("order index %q, want the ordered row alone", got)
		}
		b = store.Batch{}
		b.Delete(store.Key(fresh))
		b.Delete("ordered")
		mustCommit(t, s, acme, b)
		wantEmpty(t, s, acme)
	})
}

// Rows of the block-ordered class take one order entry per block of 64
// numbers, which is the memory they save, and it goes with the block's
// last row.
func TestBlockedRowsShareTheirBlocksOrderEntry(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *redisstore.Store) {
		ctx := t.Context()
		keys := s.PartitionKeys(acme)
		var b store.Batch
		for n := range uint64(130) {
			b.Put(storetest.BlockedKey(n), store.Value("v"))
			if len(b.Writes) == store.MaxBatchOps {
				mustCommit(t, s, acme, b)
				b = store.Batch{}
			}
		}
		mustCommit(t, s, acme, b)
		if n := s.Client().ZCard(ctx, keys[1]).Val(); n != 3 {
			t.Fatalf("order index of %d entries for 130 rows, want 3 blocks", n)
		}
		start, end := store.Key([]byte{store.BlockTag}), store.Key([]byte{store.BlockTag + 1})
		page, err := s.Scan(ctx, acme, start, end, nil, 200)
		if err != nil || len(page.Entries) != 130 || page.Next != nil {
			t.Fatalf("scan: %d rows, next %v, %v; want the 130 once", len(page.Entries), page.Next, err)
		}
		b = store.Batch{}
		for n := range uint64(130) {
			if n >= 64 && n < 128 {
				b.Delete(storetest.BlockedKey(n))
			}
		}
		mustCommit(t, s, acme, b)
		if got := s.Client().ZCard(ctx, keys[1]).Val(); got != 2 {
			t.Fatalf("order index of %d entries once a block emptied, want 2", got)
		}
		b = store.Batch{}
		for n := range uint64(130) {
			if n < 64 || n >= 128 {
				b.Delete(storetest.BlockedKey(n))
			}
			if len(b.Writes) == store.MaxBatchOps {
				mustCommit(t, s, acme, b)
				b = store.Batch{}
			}
		}
		mustCommit(t, s, acme, b)
		wantEmpty(t, s, acme)
	})
}

func TestShebangIsUsedWhereTheServerSupportsIt(t *testing.T) {
	if redistest.Miniredis(t).Shebang() {
		t.Fatal("miniredis store claims shebang support; miniredis cannot compile #!lua")
	}
	t.Run("redis", func(t *testing.T) {
		if !redistest.Real(t).Shebang() {
			t.Fatal("store on Redis 7 runs without shebang flags")
		}
	})
}

func TestParkedTimerIsDueAtMaxInt64(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *redisstore.Store) {
		var b store.Batch
		b.Put(timerKey(math.MaxInt64, "parked"), store.Value{0})
		mustCommit(t, s, acme, b)
		list, err := s.Due(t.Context(), s.BucketOf(acme), math.MaxInt64-1, 10)
		if err != nil {
			t.Fatal(err)
		}
		// A score is a double, so MaxInt64-1 and MaxInt64 are one value.
		want := []store.DuePartition{{Partition: acme, DueAtMs: math.MaxInt64}}
		if !slices.Equal(list, want) {
			t.Fatalf("due = %v, want %v", list, want)
		}
		if list, _ := s.Due(t.Context(), s.BucketOf(acme), 1<<53, 10); len(list) != 0 {
			t.Fatalf("parked timer is due by 2^53 ms: %v", list)
		}
	})
}

func TestDueAllReadsEveryBucket(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *redisstore.Store) {
		// One namespace in each of several buckets, due 1000, 2000, ...
		var want []store.DuePartition
		seen := map[int]bool{}
		for i := 0; len(want) < 8; i++ {
			p := store.Partition{Namespace: "ns-" + strconv.Itoa(i)}
			if seen[s.BucketOf(p)] {
				continue
			}
			seen[s.BucketOf(p)] = true
			due := int64(8-len(want)) * 1000
			var b store.Batch
			b.Put(timerKey(due, "ep"), store.Value{0})
			b.Put(timerKey(due+500, "other"), store.Value{0})
			mustCommit(t, s, p, b)
			want = append(want, store.DuePartition{Partition: p, DueAtMs: due})
		}
		slices.SortFunc(want, func(a, b store.DuePartition) int { return int(a.DueAtMs - b.DueAtMs) })
		got, err := s.DueAll(t.Context(), 5_000, 10)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want[:5]) {
			t.Fatalf("DueAll up to 5000 = %v, want %v", got, want[:5])
		}
		if _, err := s.DueAll(t.Context(), 5_000, 0); err == nil {
			t.Fatal("DueAll with limit 0 succeeded")
		}
		if _, err := s.Due(t.Context(), s.Buckets(), 5_000, 1); err == nil {
			t.Fatal("Due of a bucket out of range succeeded")
		}
	})
}

func TestApplyAllAppliesEachBatchAndReportsEachResult(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *redisstore.Store) {
		var items []redisstore.Item
		for i := range 20 {
			p := store.Partition{Namespace: "tenant-" + strconv.Itoa(i)}
			var b store.Batch
			if i%4 == 3 {
				b.RequireEquals("missing", nil) // fails
			} else {
				b.RequireAbsent("claimed")
			}
			b.Put("claimed", store.Value(strconv.Itoa(i)))
			b.Put(timerKey(int64(1000+i), "ep"), store.Value{0})
			items = append(items, redisstore.Item{Partition: p, Batch: b})
		}
		results, err := s.ApplyAll(t.Context(), items)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range results {
			p := items[i].Partition
			v, found, err := s.Get(t.Context(), p, "claimed")
			if err != nil {
				t.Fatal(err)
			}
			if i%4 == 3 {
				if r.Committed || r.Failed != 0 || found {
					t.Fatalf("item %d: %+v, row found %v; want precondition 0 failed and no row", i, r, found)
				}
				continue
			}
			if !r.Committed || string(v) != strconv.Itoa(i) {
				t.Fatalf("item %d: %+v, row %q; want committed with %d", i, r, v, i)
			}
		}
		// Applied again, every guard is falsified by the first run.
		results, err = s.ApplyAll(t.Context(), items)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range results {
			if r.Committed {
				t.Fatalf("item %d committed twice", i)
			}
		}
	})
}

func TestApplyAllSendsNothingWhenAnItemIsInvalid(t *testing.T) {
	s := redistest.Miniredis(t)
	var good, bad store.Batch
	good.Put("row", nil)
	bad.Put("", nil)
	_, err := s.ApplyAll(t.Context(), []redisstore.Item{
		{Partition: acme, Batch: good},
		{Partition: store.Partition{Namespace: "globex"}, Batch: bad},
	})
	if !errors.Is(err, store.ErrInvalidBatch) || !strings.Contains(err.Error(), "item 1") {
		t.Fatalf("ApplyAll = %v, want ErrInvalidBatch naming item 1", err)
	}
	wantEmpty(t, s, acme)
	_, err = s.ApplyAll(t.Context(), []redisstore.Item{
		{Partition: acme, Batch: good},
		{Partition: store.Partition{Namespace: "Not Valid"}, Batch: good},
	})
	if !errors.Is(err, store.ErrInvalidPartition) {
		t.Fatalf("ApplyAll = %v, want ErrInvalidPartition", err)
	}
	wantEmpty(t, s, acme)
}

// TestScriptsSurviveScriptFlush: after SCRIPT FLUSH (or a failover to a
// replica that never loaded them), single and pipelined batches still run.
func TestScriptsSurviveScriptFlush(t *testing.T) {
	redistest.EachFlushable(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		s := b.New(t)
		ctx := t.Context()
		flush := func() {
			t.Helper()
			if err := s.Client().ScriptFlush(ctx).Err(); err != nil {
				t.Fatalf("SCRIPT FLUSH: %v", err)
			}
		}
		claim := func(p store.Partition, id string) store.Batch {
			var b store.Batch
			b.RequireAbsent(store.Key("claim/" + id))
			b.Put(store.Key("claim/"+id), nil)
			return b
		}

		flush()
		var items []redisstore.Item
		for i := range 16 {
			p := store.Partition{Namespace: "ns-" + strconv.Itoa(i)}
			items = append(items, redisstore.Item{Partition: p, Batch: claim(p, "pipelined")})
		}
		settling := claim(acme, "settling")
		settling.Settles = true
		items = append(items, redisstore.Item{Partition: acme, Batch: settling})
		results, err := s.ApplyAll(ctx, items)
		if err != nil {
			t.Fatalf("ApplyAll after SCRIPT FLUSH: %v", err)
		}
		for i, r := range results {
			if !r.Committed {
				t.Fatalf("item %d after SCRIPT FLUSH: %+v, want committed", i, r)
			}
		}

		flush()
		mustCommit(t, s, acme, claim(acme, "single"))

		flush()
		page, err := s.Scan(ctx, acme, "claim/", "claim0", nil, 10)
		if err != nil {
			t.Fatalf("scan after SCRIPT FLUSH: %v", err)
		}
		if len(page.Entries) != 2 {
			t.Fatalf("scan after SCRIPT FLUSH found %d rows, want 2", len(page.Entries))
		}
	})
}

// TestFullRedisRefusesGrowingBatchWholeAndStillSettles: at maxmemory with
// noeviction, a growing batch is refused before its first write, and a settling
// batch still commits and frees memory.
func TestFullRedisRefusesGrowingBatchWholeAndStillSettles(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, "--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
	s := redistest.NewStore(t, srv.Client, redisstore.Options{})
	if !s.Shebang() {
		t.Fatal("redis-server runs scripts without shebang flags; this test needs Redis 7")
	}
	ctx := t.Context()
	payload := bytes.Repeat([]byte{'x'}, 8<<10)

	// Fill until a growing batch is refused.
	var filled int
	var refused error
	for filled = 0; filled < 10_000; filled++ {
		var b store.Batch
		b.RequireAbsent(store.Key(fmt.Sprintf("fill/%05d", filled)))
		b.Put(store.Key(fmt.Sprintf("fill/%05d", filled)), payload)
		if _, err := s.Apply(ctx, acme, b); err != nil {
			refused = err
			break
		}
	}
	if !errors.Is(refused, redisstore.ErrOutOfMemory) || !errors.Is(refused, store.ErrUnavailable) {
		t.Fatalf("after %d batches: %v, want ErrOutOfMemory and store.ErrUnavailable", filled, refused)
	}
	t.Logf("refused after %d batches of %d bytes", filled, len(payload))

	// A batch of several puts is refused whole. Its first write is a delete,
	// which a full Redis would allow on its own: a script that started would
	// apply it and then fail at the first put.
	var grow store.Batch
	grow.Delete("fill/00060")
	for i := range 5 {
		grow.Put(store.Key(fmt.Sprintf("refused/%d", i)), payload)
	}
	grow.Put(timerKey(1000, "refused"), store.Value{0})
	if _, err := s.Apply(ctx, acme, grow); !errors.Is(err, redisstore.ErrOutOfMemory) {
		t.Fatalf("growing batch on a full Redis: %v, want ErrOutOfMemory", err)
	}
	results, err := s.ApplyAll(ctx, []redisstore.Item{{Partition: acme, Batch: grow}})
	if !errors.Is(err, redisstore.ErrOutOfMemory) || !errors.Is(err, store.ErrUnavailable) || len(results) != 1 || results[0].Committed {
		t.Fatalf("pipelined growing batch on a full Redis: %v, %v; want ErrOutOfMemory", results, err)
	}
	// Reads still work on a full Redis, and show nothing of the refused batch.
	page, err := s.Scan(ctx, acme, "refused/", "refused0", nil, 10)
	if err != nil {
		t.Fatalf("scan on a full Redis: %v", err)
	}
	if len(page.Entries) != 0 {
		t.Fatalf("refused batch wrote %d rows", len(page.Entries))
	}
	if _, found, err := s.Get(ctx, acme, "fill/00060"); err != nil || !found {
		t.Fatalf("row deleted by the refused batch: found %v, err %v; want present", found, err)
	}
	for _, w := range grow.Writes[1:] {
		if _, found, err := s.Get(ctx, acme, w.Key); err != nil || found {
			t.Fatalf("row %q of the refused batch: found %v, err %v; want absent", w.Key, found, err)
		}
	}
	if list, _ := s.Due(ctx, s.BucketOf(acme), 1<<62, 10); len(list) != 0 {
		t.Fatalf("refused batch changed the due index: %v", list)
	}

	// A settling batch acknowledges (deletes) and writes a small row.
	before := usedMemory(t, srv.Client)
	settling := store.Batch{Settles: true}
	for i := range 50 {
		settling.Delete(store.Key(fmt.Sprintf("fill/%05d", i)))
	}
	settling.Put("backlog", store.Value("rows=0"))
	mustCommit(t, s, acme, settling)
	after := usedMemory(t, srv.Client)
	if after >= before {
		t.Fatalf("used memory %d after settling, was %d; want less", after, before)
	}
	if _, found, err := s.Get(ctx, acme, "fill/00000"); err != nil || found {
		t.Fatal("deleted row is still present")
	}
	if v, _, _ := s.Get(ctx, acme, "backlog"); string(v) != "rows=0" {
		t.Fatalf("backlog after settling = %q", v)
	}
	// With memory freed, growth is accepted again.
	mustCommit(t, s, acme, grow)
}

func usedMemory(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.InfoMap(t.Context(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestClusterSpreadsBucketsOverMasters(t *testing.T) {
	s := redistest.Cluster(t)
	cluster, ok := s.Client().(*redis.ClusterClient)
	if !ok {
		t.Fatalf("cluster store uses %T", s.Client())
	}
	masters := map[string]int{}
	for i := range 64 {
		p := store.Partition{Namespace: "spread-" + strconv.Itoa(i)}
		keys := s.PartitionKeys(p)
		var addr string
		for j, k := range keys {
			node, err := cluster.MasterForKey(t.Context(), k)
			if err != nil {
				t.Fatal(err)
			}
			if j == 0 {
				addr = node.Options().Addr
			} else if node.Options().Addr != addr {
				t.Fatalf("keys of %s live on %s and %s", p, addr, node.Options().Addr)
			}
		}
		masters[addr]++
	}
	if len(masters) < 2 {
		t.Fatalf("64 namespaces landed on masters %v, want at least two", masters)
	}
	t.Logf("namespaces per master: %v", masters)
}

// countingApply runs apply.lua with its redis.call counting the commands
// it issues of the one named first, and answers {count, the script's
// reply}: the script resolves redis through the local that shadows the
// global.
const countingApply = `
local n, real = 0, redis
local redis = setmetatable({call = function(cmd, ...)
  if cmd == '%s' then n = n + 1 end
  return real.call(cmd, ...)
end}, {__index = real})
local function apply()
%s
end
local reply = apply()
return {n, reply}`

// applyCounting runs apply.lua (countingApply) on acme with args and
// answers its reply: the count of the commands named cmd it issued, and
// the script's own reply.
func applyCounting(t *testing.T, s *redisstore.Store, cmd string, args ...any) []any {
	t.Helper()
	src := fmt.Sprintf(countingApply, cmd, redisstore.ApplyBody)
	res, err := s.Client().Eval(t.Context(), src, s.PartitionKeys(acme), args...).Slice()
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A batch reads every row it reads before writing (its guards, its
// counters, the rows it splices) in one command, however many kinds of
// operation it holds.
func TestAScriptReadsTheRowsItNeedsInOneCommand(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *redisstore.Store) {
		var b store.Batch
		b.Put("g", store.Value("1"))
		b.Put("r", store.Value("0123"))
		mustCommit(t, s, acme, b)
		res := applyCounting(t, s, "HMGET",
			"acme", "teslbfo", "e", "crp",
			"g", "1",
			"c", "\x00+\x00\x00\x00\x00\x00\x00\x01",
			"r", "\x00\x00\x00\x01ab",
			"p", "v")
		if got := fmt.Sprint(res); got != "[1 [1]]" {
			t.Fatalf("HMGETs and reply %s, want one HMGET and a commit", got)
		}
		if v, _, _ := s.Get(t.Context(), acme, "r"); string(v) != "0ab3" {
			t.Fatalf("spliced row %q, want 0ab3", v)
		}
	})
}

// A batch that puts timers, and deletes none due before the earliest it
// puts, places its partition in the due index from that put and the entry
// as it stood, with no read of the timer rows; any other batch that
// deletes a timer reads the earliest left.
func TestOnlyABatchDeletingAnEarlierTimerReadsTheEarliestTimer(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *redisstore.Store) {
		timer := func(ms int64, ref string) string { return string(storetest.TimerKey(ms, ref)) }
		for _, c := range []struct {
			name  string
			kinds string
			pairs []any
			reads int64
			due   float64
		}{
			{"a first put", "p", []any{timer(9_000, "a"), "\x00"}, 0, 9_000},
			{"an earlier put", "p", []any{timer(4_000, "b"), "\x00"}, 0, 4_000},
			{"a later put", "p", []any{timer(6_000, "c"), "\x00"}, 0, 4_000},
			{"a move earlier", "dp", []any{timer(6_000, "c"), "", timer(2_000, "c"), "\x00"}, 0, 2_000},
			{"a move of the earliest later", "dp", []any{timer(2_000, "c"), "", timer(8_000, "c"), "\x00"}, 1, 4_000},
			{"a delete", "d", []any{timer(4_000, "b"), ""}, 1, 8_000},
		} {
			args := append([]any{"acme", "teslbfo", "", c.kinds}, c.pairs...)
			res := applyCounting(t, s, "ZRANGEBYLEX", args...)
			if res[0].(int64) != c.reads {
				t.Errorf("%s: %d ZRANGEBYLEX, want %d", c.name, res[0], c.reads)
			}
			keys := s.PartitionKeys(acme)
			if got, err := s.Client().ZScore(t.Context(), keys[2], "acme").Result(); err != nil || got != c.due {
				t.Fatalf("%s: due %v (%v), want %v", c.name, got, err, c.due)
			}
		}
	})
}

// A row that stood before the batch has its order entry, so a batch whose
// every put, add and splice is to such a row issues no ZADD; a row it
// creates is added, and scans in order after it.
func TestRowsThatStoodNeedNoOrderEntry(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *redisstore.Store) {
		var seed store.Batch
		seed.Put("h", store.Value("1"))
		seed.Add("k", store.Value("\x01"), 1)
		seed.Put("r", store.Value("0123"))
		mustCommit(t, s, acme, seed)
		for _, c := range []struct {
			name  string
			kinds string
			pairs []any
			want  string
		}{
			{"rewrites of rows that stood", "pcr", []any{
				"h", "2",
				"k", "\x01\x01+\x00\x00\x00\x00\x00\x00\x01",
				"r", "\x00\x00\x00\x01ab"}, "[0 [1]]"},
			{"a new row beside them", "pp", []any{"h", "3", "g", "new"}, "[1 [1]]"},
			{"a new counter row", "c", []any{"j", "\x01\x01+\x00\x00\x00\x00\x00\x00\x01"}, "[1 [1]]"},
		} {
			args := append([]any{"acme", "teslbfo", "", c.kinds}, c.pairs...)
			if got := fmt.Sprint(applyCounting(t, s, "ZADD", args...)); got != c.want {
				t.Errorf("%s: ZADDs and reply %s, want %s", c.name, got, c.want)
			}
		}
		page, err := s.Scan(t.Context(), acme, "", "\xff", nil, 10)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, e := range page.Entries {
			keys = append(keys, string(e.Key))
		}
		if got := strings.Join(keys, " "); got != "g h j k r" {
			t.Fatalf("scan lists %q, want g h j k r", got)
		}
	})
}

// A timer rewritten in place under its guard keeps its due time, so the
// due index is neither read nor written; and a delete of a row the batch
// read as absent is no write at all.
func TestWritesThatChangeNothingIssueNoCommand(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *redisstore.Store) {
		timer := string(storetest.TimerKey(5_000, "a"))
		var seed store.Batch
		seed.Put(store.Key(timer), store.Value("\x00"))
		mustCommit(t, s, acme, seed)
		for _, c := range []struct {
			name, cmd string
			pkinds    string
			kinds     string
			pairs     []any
		}{
			{"a timer rewritten in place", "ZADD", "e", "dp", []any{timer, "\x00", timer, "", timer, "\x00"}},
			{"a timer rewritten in place", "ZRANGEBYLEX", "e", "dp", []any{timer, "\x00", timer, "", timer, "\x00"}},
			{"a delete of a row read absent", "HDEL", "a", "d", []any{"gone", "", "gone", ""}},
			{"a delete of a row read absent", "ZREM", "a", "d", []any{"gone", "", "gone", ""}},
		} {
			args := append([]any{"acme", "teslbfo", c.pkinds, c.kinds}, c.pairs...)
			if got := fmt.Sprint(applyCounting(t, s, c.cmd, args...)); got != "[0 [1]]" {
				t.Errorf("%s: %ss and reply %s, want none and a commit", c.name, c.cmd, got)
			}
		}
		if got, err := s.Client().ZScore(t.Context(), s.PartitionKeys(acme)[2], "acme").Result(); err != nil || got != 5_000 {
			t.Fatalf("due %v (%v), want 5000", got, err)
		}
	})
}

// A batch's reads after its writes take the rows it wrote as it left them
// and the others as they stood, read with its guards: one HMGET in all.
func TestReadsAfterTheWritesCostNoCommandOfTheirOwn(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *redisstore.Store) {
		var seed store.Batch
		seed.Put("g", store.Value("1"))
		seed.Put("u", store.Value("untouched"))
		mustCommit(t, s, acme, seed)
		for _, c := range []struct {
			reads []any
			want  string
		}{
			{[]any{"1", "p"}, "[1 [1 [v]]]"},
			{[]any{"3", "p", "g", "d"}, "[1 [1 [v 1 <nil>]]]"},
			{[]any{"4", "u", "p", "x", "g"}, "[1 [1 [untouched v <nil> 1]]]"},
		} {
			args := append([]any{"acme", "teslbfo", "e", "pd", "g", "1", "p", "v", "d", ""}, c.reads...)
			if got := fmt.Sprint(applyCounting(t, s, "HMGET", args...)); got != c.want {
				t.Errorf("reads %v: HMGETs and reply %s, want %s", c.reads, got, c.want)
			}
		}
	})
}

// eachClient runs f in parallel on a client of every backend: an embedded
// miniredis of its own, and the real Redis and Cluster when configured.
func eachClient(t *testing.T, f func(t *testing.T, client redis.UniversalClient)) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		f(t, b.Client(t))
	})
}
