package clientcheck_test

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/relayclient"
)

// The client mirrors a few of relay's constants rather than import the
// packages that hold them (which bring Redis): they must stay equal.
func TestTheMirroredConstantsAreRelays(t *testing.T) {
	if relayclient.MaxOutcomesPerRequest != outbox.MaxAppendOutcomes {
		t.Errorf("relayclient.MaxOutcomesPerRequest %d, relay takes %d", relayclient.MaxOutcomesPerRequest, outbox.MaxAppendOutcomes)
	}
	var relays []string
	for _, s := range httpapi.Slugs() {
		relays = append(relays, s.Type())
	}
	ours := []string{
		relayclient.TypeUnauthorized, relayclient.TypeForbidden, relayclient.TypeNotFound, relayclient.TypeMethodNotAllowed, relayclient.TypeInvalidRequest,
		relayclient.TypeInvalidOutcome, relayclient.TypeInvalidEndpoint, relayclient.TypeUnsafeURL, relayclient.TypeBodyTooLarge, relayclient.TypeUnsupportedMediaType,
		relayclient.TypeConflict, relayclient.TypeNoEndpoint, relayclient.TypeTooManyEndpoints, relayclient.TypeTooManyNamespaces, relayclient.TypeEndpointHasBacklog, relayclient.TypeEndpointDeleting,
		relayclient.TypeEndpointDisabled, relayclient.TypeNotPending, relayclient.TypeStillPending, relayclient.TypeNotDelivered, relayclient.TypeRecoveryRunning, relayclient.TypeStreamBusy, relayclient.TypeContended, relayclient.TypeUnavailable, relayclient.TypeInternal,
		relayclient.TypeCannotMint,
	}
	slices.Sort(relays)
	slices.Sort(ours)
	if !slices.Equal(ours, relays) {
		t.Errorf("problem types %v, relay's %v", ours, relays)
	}
	if relayclient.HeaderRedacted != schema.RedactedHeader {
		t.Errorf("relayclient.HeaderRedacted %q, relay's %q", relayclient.HeaderRedacted, schema.RedactedHeader)
	}
	var kinds []string
	for _, k := range schema.Kinds() {
		kinds = append(kinds, string(k))
	}
	if want := []string{string(relayclient.KindCommitted), string(relayclient.KindAborted), string(relayclient.KindExpired), string(relayclient.KindReadServed)}; !slices.Equal(want, kinds) {
		t.Errorf("kinds %v, relay's %v", want, kinds)
	}
	var events []relayclient.Kind
	for _, t := range schema.EventTypes() {
		events = append(events, relayclient.Kind(t.Kind()))
	}
	if want := []relayclient.Kind{relayclient.KindEndpointDisabled, relayclient.KindEndpointFailing, relayclient.KindEndpointRecovered, relayclient.KindEndpointGone}; !slices.Equal(want, events) || relayclient.KindEvents != relayclient.Kind(schema.KindEvents) {
		t.Errorf("event kinds %v %q, relay's %v %q", want, relayclient.KindEvents, events, schema.KindEvents)
	}
	if relayclient.SchemeMkitHookV2 != relayclient.Scheme(schema.SchemeMkitHookV2) || relayclient.SchemeStandardWebhooks != relayclient.Scheme(schema.SchemeStandardWebhooks) ||
		relayclient.SchemeStandardWebhooksV1a != relayclient.Scheme(schema.SchemeStandardWebhooksV1a) {
		t.Error("the schemes are not relay's")
	}
	for ours, relays := range map[relayclient.IngestStatus]outbox.Code{
		relayclient.StatusAccepted: outbox.Accepted, relayclient.StatusDuplicate: outbox.Duplicate, relayclient.StatusConflict: outbox.Conflict, relayclient.StatusNoEndpoint: outbox.NoEndpoint,
	} {
		if string(ours) != string(relays) {
			t.Errorf("status %q, relay's %q", ours, relays)
		}
	}
	// MaxResponseBytes must hold relay's largest answers: the key list
	// hookverify reads (1 MiB) and a full outbox page.
	if relayclient.MaxResponseBytes < httpapi.MaxBodyBytes {
		t.Errorf("MaxResponseBytes %d is below what relay may send", relayclient.MaxResponseBytes)
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
	// A call the client refuses fails with ErrInvalid before it is sent; one
	// it sends fails at the transport, which sends nothing.
	c, err := relayclient.New("http://relay.invalid", relayclient.Options{HTTPClient: &http.Client{Transport: unsent{}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	valid := func(err error) bool { return !errors.Is(err, relayclient.ErrInvalid) }
	for _, s := range corpus {
		if got, want := valid(second(c.Endpoint(ctx, s, "billing"))), (store.Partition{Namespace: s}).Validate() == nil; got != want {
			t.Fatalf("namespace %q: client %v, relay %v", s, got, want)
		}
		if got, want := valid(second(c.Endpoint(ctx, "acme", s))), schema.ValidateEndpointID(s) == nil; got != want {
			t.Fatalf("endpoint id %q: client %v, relay %v", s, got, want)
		}
		if got, want := valid(second(c.Replay(ctx, "acme", "billing", s))), outbox.ValidateClientReservationID(s) == nil; got != want {
			t.Fatalf("reservation id %q: client %v, relay %v", s, got, want)
		}
	}
	t.Logf("%d names checked", len(corpus))
}

// unsent is a transport that sends nothing.
type unsent struct{}

func (unsent) RoundTrip(*http.Request) (*http.Response, error) { return nil, errors.New("not sent") }
