package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/hookrelay/relay/internal/store"
)

// registered reports whether p is in its bucket's registry, and fails the
// test when it is there more than once.
func registered(t *testing.T, s Store, p store.Partition) bool {
	t.Helper()
	n := 0
	for _, q := range listAll(t, s, store.MaxRegistryPage) {
		if q == p {
			n++
		}
	}
	if n > 1 {
		t.Fatalf("%s is listed %d times", p, n)
	}
	return n == 1
}

func wantRegistered(t *testing.T, s Store, p store.Partition, want bool) {
	t.Helper()
	if got := registered(t, s, p); got != want {
		t.Fatalf("%s registered = %v, want %v", p, got, want)
	}
}

// registryOrder sorts partitions in the walk's order: bucket, then name.
func registryOrder(s Store, parts []store.Partition) {
	slices.SortFunc(parts, func(a, b store.Partition) int {
		if d := s.BucketOf(a) - s.BucketOf(b); d != 0 {
			return d
		}
		switch {
		case a.Namespace < b.Namespace:
			return -1
		case a.Namespace > b.Namespace:
			return 1
		}
		return 0
	})
}

// listAll walks the whole registry with pages of limit, each resumed from
// the persistent form of the previous page's cursor, and checks the paging
// contract on the way: no page exceeds its limit, and the walk ends.
func listAll(t *testing.T, s Store, limit int) []store.Partition {
	t.Helper()
	var all []store.Partition
	c := store.RegistryCursor{}
	for pages := 0; ; pages++ {
		if pages > 100_000 {
			t.Fatal("the registry walk does not end")
		}
		page, err := store.ListRegistered(t.Context(), s, c, limit)
		if err != nil {
			t.Fatalf("list registered from %+v: %v", c, err)
		}
		if len(page.Partitions) > limit {
			t.Fatalf("page of %d partitions exceeds limit %d", len(page.Partitions), limit)
		}
		all = append(all, page.Partitions...)
		if page.Next == nil {
			return all
		}
		if c, err = store.ParseRegistryCursor(s, page.Next.Bytes()); err != nil {
			t.Fatalf("cursor %+v does not parse back: %v", *page.Next, err)
		}
		if c != *page.Next {
			t.Fatalf("cursor %+v parses back as %+v", *page.Next, c)
		}
	}
}

// endpointKey is a registering row key, as the outbox lays out an endpoint.
func endpointKey(id string) store.Key { return store.Key(string(store.RegistryTag) + id) }

func testFirstRegisteringRowRegistersAndLastUnregisters(t *testing.T, s Store) {
	wantRegistered(t, s, acme, false)
	put(t, s, acme, "q", "sequence", string(TimerKey(1_000, "a")), idle)
	wantRegistered(t, s, acme, false)

	put(t, s, acme, string(endpointKey("a")), "{}")
	wantRegistered(t, s, acme, true)
	wantRegistered(t, s, globex, false)
	put(t, s, acme, string(endpointKey("b")), "{}")
	wantRegistered(t, s, acme, true)

	var b store.Batch
	b.Delete(endpointKey("a"))
	mustCommit(t, s, acme, b)
	wantRegistered(t, s, acme, true)

	b = store.Batch{Settles: true}
	b.Delete(endpointKey("b"))
	b.Delete(endpointKey("never-there"))
	mustCommit(t, s, acme, b)
	wantRegistered(t, s, acme, false)
	// Its other rows stay, and do not register it.
	wantRow(t, s, acme, "q", "sequence")
	wantDue(t, s, acme, 1_000)
}

func testOnlyTheRegistryTagRegisters(t *testing.T, s Store) {
	below, above := string([]byte{store.RegistryTag - 1, 0xff}), string([]byte{store.RegistryTag + 1})
	put(t, s, acme, below, "", above, "")
	wantRegistered(t, s, acme, false)
	// The tag alone is a registering key.
	put(t, s, acme, string([]byte{store.RegistryTag}), "")
	wantRegistered(t, s, acme, true)
	// A put and a delete of one key in one batch leave what the last says.
	var b store.Batch
	b.Delete(store.Key([]byte{store.RegistryTag}))
	b.Put(endpointKey("x"), store.Value("{}"))
	b.Delete(endpointKey("x"))
	mustCommit(t, s, acme, b)
	wantRegistered(t, s, acme, false)
}

func testFailedBatchLeavesRegistryUnchanged(t *testing.T, s Store) {
	var b store.Batch
	b.RequireEquals("missing", nil)
	b.Put(endpointKey("a"), store.Value("{}"))
	mustFailAt(t, s, acme, b, 0)
	wantRegistered(t, s, acme, false)
	wantAbsent(t, s, acme, endpointKey("a"))

	put(t, s, acme, string(endpointKey("a")), "v1")
	b = store.Batch{Settles: true}
	b.RequireEquals(endpointKey("a"), store.Value("v0"))
	b.Delete(endpointKey("a"))
	mustFailAt(t, s, acme, b, 0)
	wantRegistered(t, s, acme, true)

	// A batch refused whole (a counter add of another layout) changes
	// nothing either.
	put(t, s, globex, "bad-counter", "x")
	b = store.Batch{}
	b.Put(endpointKey("a"), store.Value("{}"))
	b.Add("bad-counter", store.Value{1}, 1)
	if _, err := s.Apply(t.Context(), globex, b); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("add to a row of another layout: %v, want ErrCorrupt", err)
	}
	wantRegistered(t, s, globex, false)
}

func testRetriedBatchRegistersOnce(t *testing.T, s Store) {
	// An endpoint creation as the outbox guards it, sent twice as after a
	// lost reply: the second run fails its own guard and changes nothing.
	var b store.Batch
	b.RequireAbsent(endpointKey("a"))
	b.Put(endpointKey("a"), store.Value("{}"))
	mustCommit(t, s, acme, b)
	mustFailAt(t, s, acme, b, 0)
	wantRegistered(t, s, acme, true)

	// An unguarded put run twice still leaves one entry.
	var again store.Batch
	again.Put(endpointKey("b"), store.Value("{}"))
	mustCommit(t, s, acme, again)
	mustCommit(t, s, acme, again)
	wantRegistered(t, s, acme, true)

	// The deletion of the last, run twice, unregisters once and for all.
	del := store.Batch{Settles: true}
	del.Delete(endpointKey("a"))
	del.Delete(endpointKey("b"))
	mustCommit(t, s, acme, del)
	mustCommit(t, s, acme, del)
	wantRegistered(t, s, acme, false)
}

// testRegistryFollowsRowsAcrossBatches: a deletion spread over several
// batches (a forced delete drops rows a page at a time, the endpoint last)
// leaves the partition registered until its last registering row goes.
func testRegistryFollowsRowsAcrossBatches(t *testing.T, s Store) {
	var b store.Batch
	b.Put(endpointKey("a"), store.Value("{}"))
	for i := range 50 {
		b.Put(store.Key(fmt.Sprintf("pa/%03d", i)), nil)
	}
	mustCommit(t, s, acme, b)
	for page := range 5 {
		d := store.Batch{Settles: true}
		d.RequireEquals(endpointKey("a"), store.Value("{}"))
		for i := range 10 {
			d.Delete(store.Key(fmt.Sprintf("pa/%03d", 10*page+i)))
		}
		mustCommit(t, s, acme, d)
		wantRegistered(t, s, acme, true)
	}
	d := store.Batch{Settles: true}
	d.RequireEquals(endpointKey("a"), store.Value("{}"))
	d.Delete(endpointKey("a"))
	mustCommit(t, s, acme, d)
	wantRegistered(t, s, acme, false)
}

func registerAll(t *testing.T, s Store, parts []store.Partition) {
	t.Helper()
	for _, p := range parts {
		put(t, s, p, string(endpointKey("a")), "{}")
	}
}

func unregister(t *testing.T, s Store, p store.Partition) {
	t.Helper()
	b := store.Batch{Settles: true}
	b.Delete(endpointKey("a"))
	mustCommit(t, s, p, b)
}

func testListingVisitsEveryRegisteredPartitionOnceInOrder(t *testing.T, s Store) {
	var want []store.Partition
	for i := range 300 {
		want = append(want, store.Partition{Namespace: fmt.Sprintf("ns-%03d", i)})
	}
	registerAll(t, s, want)
	registryOrder(s, want)
	for _, limit := range []int{1, 7, 100, store.MaxRegistryPage, store.MaxRegistryPage + 1} {
		if got := listAll(t, s, limit); !slices.Equal(got, want) {
			t.Fatalf("walk with pages of %d: %d partitions, want the %d registered in order\n got %v\nwant %v", limit, len(got), len(want), got, want)
		}
	}
	if _, err := store.ListRegistered(t.Context(), s, store.RegistryCursor{}, 0); err == nil {
		t.Fatal("a page of limit 0 must be refused")
	}
}

// testListingAcrossChangesLosesAndRepeatsNothing: partitions registered or
// unregistered between pages never make the walk lose or repeat one that
// stayed registered; one registered ahead of the cursor is found, and one
// unregistered ahead of it is not.
func testListingAcrossChangesLosesAndRepeatsNothing(t *testing.T, s Store) {
	var stay []store.Partition
	for i := range 120 {
		stay = append(stay, store.Partition{Namespace: fmt.Sprintf("stay-%03d", i)})
	}
	registerAll(t, s, stay)
	registryOrder(s, stay)
	// Partitions that come and go: each is placed ahead of or behind the
	// walk when it changes.
	var churn []store.Partition
	for i := range 40 {
		churn = append(churn, store.Partition{Namespace: fmt.Sprintf("churn-%03d", i)})
	}
	registerAll(t, s, churn[:20])
	before := func(p store.Partition, c store.RegistryCursor) bool {
		b := s.BucketOf(p)
		return b < c.Bucket || (b == c.Bucket && p.Namespace <= c.After)
	}
	seen := map[store.Partition]int{}
	c := store.RegistryCursor{}
	var wantAhead, wantGone []store.Partition
	for step := 0; ; step++ {
		page, err := store.ListRegistered(t.Context(), s, c, 9)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range page.Partitions {
			seen[p]++
		}
		if page.Next == nil {
			break
		}
		c = *page.Next
		// Unregister one of the first twenty and register one of the
		// last twenty, and note which the rest of the walk must show.
		if step < 20 {
			gone, come := churn[step], churn[20+step]
			unregister(t, s, gone)
			registerAll(t, s, []store.Partition{come})
			if !before(gone, c) {
				wantGone = append(wantGone, gone)
			}
			if !before(come, c) {
				wantAhead = append(wantAhead, come)
			}
		}
	}
	for _, p := range stay {
		if seen[p] != 1 {
			t.Fatalf("%s, registered throughout, was listed %d times", p, seen[p])
		}
	}
	for p, n := range seen {
		if n != 1 {
			t.Fatalf("%s was listed %d times", p, n)
		}
	}
	for _, p := range wantAhead {
		if seen[p] != 1 {
			t.Fatalf("%s, registered ahead of the walk, was not listed", p)
		}
	}
	for _, p := range wantGone {
		if seen[p] != 0 {
			t.Fatalf("%s, unregistered ahead of the walk, was listed", p)
		}
	}
	if len(wantAhead) == 0 || len(wantGone) == 0 {
		t.Fatalf("the churn fell behind the walk only (%d ahead, %d gone): the test proves nothing", len(wantAhead), len(wantGone))
	}
}

func testForgedRegistryCursorsAreRefused(t *testing.T, s Store) {
	var other store.Partition
	for i := 0; ; i++ {
		other = store.Partition{Namespace: fmt.Sprintf("ns-%d", i)}
		if s.BucketOf(other) != s.BucketOf(acme) {
			break
		}
	}
	good := store.RegistryCursor{Bucket: s.BucketOf(acme), After: "acme"}
	if c, err := store.ParseRegistryCursor(s, good.Bytes()); err != nil || c != good {
		t.Fatalf("a cursor of acme parses as %+v, %v", c, err)
	}
	for name, b := range map[string][]byte{
		"empty":                   {},
		"bucket out of range":     store.RegistryCursor{Bucket: s.Buckets()}.Bytes(),
		"huge bucket":             {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"overlong varint":         {0x80, 0x00},
		"truncated varint":        {0x80},
		"not a namespace":         append(store.RegistryCursor{Bucket: s.BucketOf(acme)}.Bytes(), "ACME"...),
		"name of another bucket":  store.RegistryCursor{Bucket: s.BucketOf(acme), After: other.Namespace}.Bytes(),
		"name with a NUL":         append(store.RegistryCursor{Bucket: s.BucketOf(acme)}.Bytes(), "acme\x00"...),
		"name past the name size": append(store.RegistryCursor{Bucket: 0}.Bytes(), make([]byte, 4096)...),
	} {
		if c, err := store.ParseRegistryCursor(s, b); !errors.Is(err, store.ErrInvalidCursor) {
			t.Fatalf("%s: cursor %q parses as %+v, %v; want ErrInvalidCursor", name, b, c, err)
		}
	}
	if _, err := store.ListRegistered(t.Context(), s, store.RegistryCursor{Bucket: -1}, 10); !errors.Is(err, store.ErrInvalidCursor) {
		t.Fatalf("a negative bucket: %v, want ErrInvalidCursor", err)
	}
}

func wantCount(t *testing.T, s Store, want int) {
	t.Helper()
	if n, err := s.CountRegistered(t.Context()); err != nil || n != want {
		t.Fatalf("count registered: %d, %v; want %d", n, err, want)
	}
}

// testCountRegisteredCountsEachRegisteredPartitionOnce: the count is the
// registry's, over every bucket: a partition counts once however many
// registering rows it holds, and not at all with none.
func testCountRegisteredCountsEachRegisteredPartitionOnce(t *testing.T, s Store) {
	wantCount(t, s, 0)
	var parts []store.Partition
	for i := range 300 {
		parts = append(parts, store.Partition{Namespace: fmt.Sprintf("ns-%03d", i)})
	}
	registerAll(t, s, parts)
	buckets := map[int]bool{}
	for _, p := range parts {
		buckets[s.BucketOf(p)] = true
	}
	if len(buckets) < 2 {
		t.Fatalf("300 partitions in %d bucket: the test proves nothing", len(buckets))
	}
	wantCount(t, s, 300)
	put(t, s, parts[0], string(endpointKey("b")), "{}")
	put(t, s, acme, "q", "sequence")
	wantCount(t, s, 300)
	for _, p := range parts[:100] {
		unregister(t, s, p)
	}
	// parts[0] keeps its second registering row.
	wantCount(t, s, 201)
}
