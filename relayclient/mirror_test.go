package relayclient

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/store"
)

// The client mirrors a few of relay's constants rather than import the
// packages that hold them (which bring Redis): they must stay equal.
func TestTheMirroredConstantsAreRelays(t *testing.T) {
	if MaxOutcomesPerRequest != outbox.MaxAppendOutcomes {
		t.Errorf("MaxOutcomesPerRequest %d, relay takes %d", MaxOutcomesPerRequest, outbox.MaxAppendOutcomes)
	}
	var relays []string
	for _, s := range httpapi.Slugs() {
		relays = append(relays, s.Type())
	}
	ours := []string{
		TypeUnauthorized, TypeForbidden, TypeNotFound, TypeMethodNotAllowed, TypeInvalidRequest,
		TypeInvalidOutcome, TypeInvalidEndpoint, TypeUnsafeURL, TypeBodyTooLarge, TypeUnsupportedMediaType,
		TypeConflict, TypeNoEndpoint, TypeTooManyEndpoints, TypeTooManyNamespaces, TypeEndpointHasBacklog, TypeEndpointDeleting,
		TypeEndpointDisabled, TypeNotPending, TypeStillPending, TypeNotDelivered, TypeRecoveryRunning, TypeStreamBusy, TypeContended, TypeUnavailable, TypeInternal,
	}
	slices.Sort(relays)
	slices.Sort(ours)
	if !slices.Equal(ours, relays) {
		t.Errorf("problem types %v, relay's %v", ours, relays)
	}
	if HeaderRedacted != outbox.RedactedHeader {
		t.Errorf("HeaderRedacted %q, relay's %q", HeaderRedacted, outbox.RedactedHeader)
	}
	if typePrefix != httpapi.ProblemTypePrefix {
		t.Errorf("type prefix %q, relay's %q", typePrefix, httpapi.ProblemTypePrefix)
	}
	var kinds []string
	for _, k := range outbox.Kinds() {
		kinds = append(kinds, string(k))
	}
	if want := []string{string(KindCommitted), string(KindAborted), string(KindExpired), string(KindReadServed)}; !slices.Equal(want, kinds) {
		t.Errorf("kinds %v, relay's %v", want, kinds)
	}
	var events []Kind
	for _, t := range outbox.EventTypes() {
		events = append(events, Kind(t.Kind()))
	}
	if want := []Kind{KindEndpointDisabled, KindEndpointFailing, KindEndpointRecovered, KindEndpointGone}; !slices.Equal(want, events) || KindEvents != Kind(outbox.KindEvents) {
		t.Errorf("event kinds %v %q, relay's %v %q", want, KindEvents, events, outbox.KindEvents)
	}
	if SchemeMkitHookV2 != Scheme(outbox.SchemeMkitHookV2) || SchemeStandardWebhooks != Scheme(outbox.SchemeStandardWebhooks) ||
		SchemeStandardWebhooksV1a != Scheme(outbox.SchemeStandardWebhooksV1a) {
		t.Error("the schemes are not relay's")
	}
	for ours, relays := range map[IngestStatus]outbox.Code{
		StatusAccepted: outbox.Accepted, StatusDuplicate: outbox.Duplicate, StatusConflict: outbox.Conflict, StatusNoEndpoint: outbox.NoEndpoint,
	} {
		if string(ours) != string(relays) {
			t.Errorf("status %q, relay's %q", ours, relays)
		}
	}
	// MaxResponseBytes must hold relay's largest answers: the key list
	// hookverify reads (1 MiB) and a full outbox page.
	if MaxResponseBytes < httpapi.MaxBodyBytes {
		t.Errorf("MaxResponseBytes %d is below what relay may send", MaxResponseBytes)
	}
}

// The names the client refuses before sending are exactly those relay
// refuses: every short string over an alphabet of the edge cases, the
// lengths at the limits, and random strings.
func TestThePathChecksAreRelays(t *testing.T) {
	var corpus []string
	alphabet := []string{"a", "z", "A", "Z", "0", "9", "_", "-", ".", ":", "s", "/", "?", "%", "é", " ", "\x00"}
	var gen func(prefix string, n int)
	gen = func(prefix string, n int) {
		corpus = append(corpus, prefix)
		if n == 0 {
			return
		}
		for _, c := range alphabet {
			gen(prefix+c, n-1)
		}
	}
	gen("", 3)
	for _, n := range []int{62, 63, 64, 127, 128, 129} {
		corpus = append(corpus, strings.Repeat("a", n), "s:"+strings.Repeat("a", n-2), "s"+strings.Repeat("a", n-1), strings.Repeat("A", n))
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, r.IntN(140))
		for i := range b {
			b[i] = "az09AZ_-.:s/"[r.IntN(12)]
		}
		corpus = append(corpus, string(b))
	}
	for _, s := range corpus {
		if got, want := validName(s), (store.Partition{Namespace: s}).Validate() == nil; got != want {
			t.Fatalf("namespace %q: client %v, relay %v", s, got, want)
		}
		if got, want := validName(s), outbox.ValidateEndpointID(s) == nil; got != want {
			t.Fatalf("endpoint id %q: client %v, relay %v", s, got, want)
		}
		if got, want := validClientRID(s), outbox.ValidateClientReservationID(s) == nil; got != want {
			t.Fatalf("reservation id %q: client %v, relay %v", s, got, want)
		}
	}
	t.Logf("%d names checked", len(corpus))
}
