package clientcheck_test

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/relay/api/apitest"
	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/relayclient"
)

func committed(rid string) relayclient.Outcome {
	return relayclient.Outcome{
		ReservationID: rid, Repository: "acme/widgets", OccurredUnixMs: time.Now().UnixMilli(),
		Committed: &relayclient.Committed{BytesStored: 1024, Refs: []relayclient.Ref{
			{Name: "refs/heads/main", New: strings.Repeat("ab", 32)},
			{Name: "refs/heads/old", Deleted: true},
		}},
	}
}

// outcomes are n outcomes of every kind but read_served, ids prefix-0 ...
func outcomes(prefix string, n int) []relayclient.Outcome {
	out := make([]relayclient.Outcome, n)
	now := time.Now().UnixMilli()
	for i := range out {
		o := relayclient.Outcome{ReservationID: fmt.Sprintf("%s-%d", prefix, i), Repository: "acme/widgets", OccurredUnixMs: now}
		switch i % 3 {
		case 0:
			o.Committed = &relayclient.Committed{NewToRepo: uint64(i)}
		case 1:
			o.Aborted = &relayclient.Aborted{Reason: "client_cancelled", Detail: "gone"}
		default:
			o.Expired = &relayclient.Expired{}
		}
		out[i] = o
	}
	return out
}

func wantProblem(t *testing.T, err error, status int, typ string) *relayclient.Problem {
	t.Helper()
	var p *relayclient.Problem
	if !errors.As(err, &p) {
		t.Fatalf("error %v is not a *Problem", err)
	}
	if p.Status != status || p.Type != typ {
		t.Fatalf("problem %d %q, want %d %q (%v)", p.Status, p.Type, status, typ, err)
	}
	if p.RequestID == "" {
		t.Errorf("problem %v has no request id", err)
	}
	return p
}

func statuses(res []relayclient.IngestResult) map[relayclient.IngestStatus]int {
	m := map[relayclient.IngestStatus]int{}
	for _, r := range res {
		m[r.Status]++
	}
	return m
}

// Every route of the contract, called through the client on a whole relay:
// every request and answer is checked against api/openapi.yaml, and every
// operation but /metrics is called.
func TestEveryRouteAgainstARelay(t *testing.T) {
	r := startRelay(t)
	c, ct := client(t, r.url, r.token(httpapi.ScopeAdmin))
	ctx := t.Context()

	if err := c.Healthz(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Readyz(ctx); err != nil {
		t.Fatal(err)
	}
	keys, err := c.HookKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if list, err := hookverify.ParseKeyList(keys); err != nil || len(list.Keys) != 1 {
		t.Fatalf("key list %s: %v", keys, err)
	}

	saved, err := c.PutEndpoint(ctx, "acme", "billing", relayclient.EndpointConfig{
		URL: "http://127.0.0.1:9/hooks", Scheme: relayclient.SchemeStandardWebhooks, MaxInFlight: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !saved.Created || !strings.HasPrefix(saved.Secret, "whsec_") || saved.MaxInFlight != 2 || !saved.Enabled || saved.CreatedAt.IsZero() {
		t.Fatalf("created %+v", saved)
	}
	saved, err = c.PutEndpoint(ctx, "acme", "billing", relayclient.EndpointConfig{URL: "http://127.0.0.1:9/hooks", Scheme: relayclient.SchemeStandardWebhooks})
	if err != nil || saved.Created || saved.Secret != "" || saved.MaxInFlight != 1 {
		t.Fatalf("replaced %+v, %v", saved, err)
	}
	v1a, err := c.PutEndpoint(ctx, "acme", "ledger", relayclient.EndpointConfig{URL: "http://127.0.0.1:9/ledger", Scheme: relayclient.SchemeStandardWebhooksV1a})
	if err != nil || !v1a.Created || v1a.Secret != "" || !strings.HasPrefix(v1a.PublicKey, "whpk_") {
		t.Fatalf("v1a endpoint %+v, %v", v1a, err)
	}
	if (&hookverify.StandardVerifier{PublicKeys: []string{v1a.PublicKey}}).Check() != nil {
		t.Fatalf("the shown public key %q does not configure a verifier", v1a.PublicKey)
	}
	rotated, err := c.PutEndpoint(ctx, "acme", "ledger", relayclient.EndpointConfig{URL: "http://127.0.0.1:9/ledger", Scheme: relayclient.SchemeStandardWebhooksV1a, RotateKey: true})
	if err != nil || rotated.PublicKey == v1a.PublicKey || !strings.HasPrefix(rotated.PublicKey, "whpk_") {
		t.Fatalf("rotated %+v, %v", rotated, err)
	}
	if ep, err := c.Endpoint(ctx, "acme", "ledger"); err != nil || ep.PublicKey != rotated.PublicKey {
		t.Fatalf("endpoint %+v, %v: want the rotated public key", ep, err)
	}
	if _, err := c.DeleteEndpoint(ctx, "acme", "ledger", false); err != nil {
		t.Fatal(err)
	}
	disabled := false
	if _, err := c.PutEndpoint(ctx, "acme", "audit", relayclient.EndpointConfig{
		URL: "http://127.0.0.1:9/audit", Kinds: []relayclient.Kind{relayclient.KindReadServed}, Enabled: &disabled,
	}); err != nil {
		t.Fatal(err)
	}
	list, err := c.ListEndpoints(ctx, "acme")
	if err != nil || len(list) != 2 || list[0].ID != "audit" || list[1].ID != "billing" || list[0].Enabled || list[0].Scheme != relayclient.SchemeMkitHookV2 {
		t.Fatalf("list %+v, %v", list, err)
	}
	if ep, err := c.Endpoint(ctx, "acme", "billing"); err != nil || ep.URL != "http://127.0.0.1:9/hooks" || len(ep.Kinds) != 0 {
		t.Fatalf("endpoint %+v, %v", ep, err)
	}
	if ep, err := c.Endpoint(ctx, "acme", "billing"); err != nil || ep.TimeoutMs != 5000 || ep.Headers == nil || len(ep.Headers) != 0 {
		t.Fatalf("endpoint without settings %+v, %v: want timeout 5000 and no headers", ep, err)
	}
	if ep, err := c.Endpoint(ctx, "acme", "billing"); err != nil || len(ep.PerMinute) != 60 || ep.PerMinute[0].Start.IsZero() ||
		ep.PerMinute[59].Start.Sub(ep.PerMinute[0].Start) != 59*time.Minute {
		t.Fatalf("endpoint's minutes %+v, %v: want the last hour", ep.PerMinute, err)
	}
	if list[1].PerMinute != nil {
		t.Fatalf("the list carries minutes: %+v", list[1].PerMinute)
	}
	set, err := c.PutEndpoint(ctx, "acme", "audit", relayclient.EndpointConfig{
		URL: "http://127.0.0.1:9/audit", Kinds: []relayclient.Kind{relayclient.KindReadServed}, Enabled: &disabled,
		TimeoutMs: 2000, Headers: map[string]string{"x-tenant": "acme", "x-api-key": "k-123"},
	})
	wantHeaders := map[string]string{"x-tenant": "acme", "x-api-key": relayclient.HeaderRedacted}
	if err != nil || set.TimeoutMs != 2000 || !maps.Equal(set.Headers, wantHeaders) {
		t.Fatalf("endpoint with settings %+v, %v", set, err)
	}
	// An edit sends the redacted header back by name.
	kept, err := c.PutEndpoint(ctx, "acme", "audit", relayclient.EndpointConfig{
		URL: "http://127.0.0.1:9/audit", Kinds: []relayclient.Kind{relayclient.KindReadServed}, Enabled: &disabled,
		TimeoutMs: 2000, Headers: map[string]string{"x-tenant": "acme-2"}, KeepHeaders: []string{"x-api-key"},
	})
	if err != nil || !maps.Equal(kept.Headers, map[string]string{"x-tenant": "acme-2", "x-api-key": relayclient.HeaderRedacted}) {
		t.Fatalf("endpoint with a kept header %+v, %v", kept, err)
	}
	limited, err := c.PutEndpoint(ctx, "acme", "audit", relayclient.EndpointConfig{
		URL: "http://127.0.0.1:9/audit", Kinds: []relayclient.Kind{relayclient.KindReadServed}, Enabled: &disabled, RateLimit: 50,
	})
	if err != nil || limited.RateLimit != 50 || limited.Throttle != nil {
		t.Fatalf("endpoint with a rate limit %+v, %v", limited, err)
	}
	_, err = c.PutEndpoint(ctx, "acme", "audit", relayclient.EndpointConfig{URL: "http://127.0.0.1:9/audit", Headers: map[string]string{"webhook-id": "x"}})
	wantProblem(t, err, http.StatusBadRequest, relayclient.TypeInvalidEndpoint)
	_, err = c.Endpoint(ctx, "acme", "nope")
	wantProblem(t, err, http.StatusNotFound, relayclient.TypeNotFound)

	one := committed("r-1")
	if res, err := c.Ingest(ctx, "acme", one); err != nil || res.Status != relayclient.StatusAccepted || res.ReservationID != "r-1" {
		t.Fatalf("ingest %+v, %v", res, err)
	}
	if res, err := c.Ingest(ctx, "acme", one); err != nil || res.Status != relayclient.StatusDuplicate {
		t.Fatalf("ingest again %+v, %v", res, err)
	}
	other := one
	other.Repository = "acme/other"
	_, err = c.Ingest(ctx, "acme", other)
	wantProblem(t, err, http.StatusConflict, relayclient.TypeConflict)

	all := append(outcomes("b", 250), other)
	res, err := c.IngestAll(ctx, "acme", all)
	if err != nil || len(res) != len(all) {
		t.Fatalf("ingest all: %d results, %v", len(res), err)
	}
	for i, r := range res {
		if r.ReservationID != all[i].ReservationID {
			t.Fatalf("result %d is %s's", i, r.ReservationID)
		}
	}
	if last := res[250]; last.Status != relayclient.StatusConflict || last.Type != relayclient.TypeConflict {
		t.Fatalf("the conflicting outcome: %+v", last)
	}
	if n := statuses(res[:250])[relayclient.StatusAccepted]; n != 250 {
		t.Fatalf("%d of 250 accepted", n)
	}
	res, err = c.IngestAll(ctx, "acme", all[:250])
	if err != nil || statuses(res)[relayclient.StatusDuplicate] != 250 {
		t.Fatalf("all again: %v, %v", statuses(res), err)
	}

	var rows []relayclient.OutboxRow
	q := relayclient.OutboxQuery{Limit: 100}
	for {
		page, err := c.Outbox(ctx, "acme", "billing", q)
		if err != nil {
			t.Fatal(err)
		}
		if page.Backlog.Rows != 251 || page.Endpoint != "billing" {
			t.Fatalf("page %+v", page)
		}
		rows = append(rows, page.Rows...)
		if page.NextCursor == nil {
			break
		}
		q.Cursor = *page.NextCursor
	}
	if len(rows) != 251 || rows[0].ReservationID != "r-1" || rows[0].Kind != relayclient.KindCommitted || rows[1].ReservationID != "b-0" {
		t.Fatalf("%d rows, first %+v", len(rows), rows[0])
	}

	nss, err := c.Namespaces(ctx, relayclient.NamespaceQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var listed []relayclient.NamespaceSummary
	for _, ns := range nss.Namespaces {
		if ns.Namespace == "acme" {
			listed = append(listed, ns)
		}
	}
	// audit is disabled by an operator: not failing, disabled.
	if len(listed) != 1 || listed[0].Endpoints != 2 || listed[0].Backlog.Rows != 251 || listed[0].Disabled != 1 || listed[0].Failing > 1 {
		t.Fatalf("namespaces %+v", nss)
	}
	dis, err := c.Namespaces(ctx, relayclient.NamespaceQuery{Disabled: true, Prefix: "ac"})
	if err != nil || len(dis.Namespaces) != 1 || dis.Namespaces[0].Namespace != "acme" {
		t.Fatalf("disabled namespaces under ac: %+v, %v", dis, err)
	}
	fleet, err := c.Fleet(ctx)
	if err != nil || fleet.DisabledNamespaces != 1 || fleet.Backlog.Rows < 251 {
		t.Fatalf("fleet %+v, %v", fleet, err)
	}

	rep, err := c.Replay(ctx, "acme", "billing", "b-7")
	if err != nil || rep.ReservationID != "b-7" || rep.Endpoint != "billing" || rep.NextAttemptAt.IsZero() {
		t.Fatalf("replay %+v, %v", rep, err)
	}
	_, err = c.Replay(ctx, "acme", "billing", "never-sent")
	wantProblem(t, err, http.StatusNotFound, relayclient.TypeNotPending)

	preview, err := c.PreviewRecovery(ctx, "acme", "billing", time.Now().Add(-time.Hour), time.Now().Add(time.Minute))
	if err != nil || preview.Endpoint != "billing" || preview.Pending != 251 || preview.Delivered != 0 || preview.Partial || preview.Examined < 251 {
		t.Fatalf("recovery preview %+v, %v", preview, err)
	}
	off, err := c.DisableEndpoint(ctx, "acme", "billing")
	if err != nil || off.Enabled || off.URL != "http://127.0.0.1:9/hooks" || off.Backlog.Rows != 251 {
		t.Fatalf("disable %+v, %v", off, err)
	}
	_, err = c.RetryEndpoint(ctx, "acme", "billing", false)
	wantProblem(t, err, http.StatusConflict, relayclient.TypeEndpointDisabled)
	retried, err := c.RetryEndpoint(ctx, "acme", "billing", true)
	if err != nil || !retried.Enabled || retried.PendingRows != 251 || retried.NextAttemptAt == nil {
		t.Fatalf("enable and deliver %+v, %v", retried, err)
	}
	if on, err := c.EnableEndpoint(ctx, "acme", "billing"); err != nil || !on.Enabled {
		t.Fatalf("enable of an enabled endpoint %+v, %v", on, err)
	}

	story, err := c.Outcome(ctx, "acme", "r-1")
	if err != nil || story.ReservationID != "r-1" || story.Outcome.Committed == nil || story.Outcome.Committed.Refs[1].Deleted != true ||
		len(story.Endpoints) != 2 || story.Endpoints[0].State != relayclient.OutcomeFiltered || story.Endpoints[1].State != relayclient.OutcomePending {
		t.Fatalf("outcome %+v, %v", story, err)
	}
	_, err = c.Outcome(ctx, "acme", "never-sent")
	wantProblem(t, err, http.StatusNotFound, relayclient.TypeNotFound)
	listed2, err := c.Outcomes(ctx, "acme", relayclient.OutcomesQuery{Endpoint: "billing", State: relayclient.OutcomePending, Since: time.Now().Add(-time.Hour), Limit: 100})
	if err != nil || len(listed2.Outcomes) == 0 || listed2.Outcomes[0].ReservationID != "r-1" || listed2.NextCursor == "" {
		t.Fatalf("outcomes %+v, %v", listed2, err)
	}
	if next, err := c.Outcomes(ctx, "acme", relayclient.OutcomesQuery{Cursor: listed2.NextCursor, Limit: 100}); err != nil || len(next.Outcomes) == 0 {
		t.Fatalf("next page %+v, %v", next, err)
	}
	newest, err := c.Outcomes(ctx, "acme", relayclient.OutcomesQuery{NewestFirst: true, Kind: relayclient.KindCommitted, RIDPrefix: "b-", Limit: 2})
	if err != nil || len(newest.Outcomes) != 2 || newest.Outcomes[0].ReservationID != rows[250].ReservationID || newest.NextCursor == "" || newest.PrevCursor != "" {
		t.Fatalf("newest first %+v, %v", newest, err)
	}
	older, err := c.Outcomes(ctx, "acme", relayclient.OutcomesQuery{NewestFirst: true, Kind: relayclient.KindCommitted, RIDPrefix: "b-", Limit: 2, Cursor: newest.NextCursor})
	if err != nil || len(older.Outcomes) != 2 || older.Outcomes[0].Seq >= newest.Outcomes[1].Seq || older.PrevCursor == "" {
		t.Fatalf("older %+v, %v", older, err)
	}
	if back, err := c.Outcomes(ctx, "acme", relayclient.OutcomesQuery{NewestFirst: true, Kind: relayclient.KindCommitted, RIDPrefix: "b-", Limit: 2, Cursor: older.PrevCursor}); err != nil || !reflect.DeepEqual(back.Outcomes, newest.Outcomes) {
		t.Fatalf("back to the newest %+v, %v", back, err)
	}
	if at, err := c.Outbox(ctx, "acme", "billing", relayclient.OutboxQuery{FromSequence: newest.Outcomes[1].Seq, Limit: 1}); err != nil || len(at.Rows) != 1 || at.Rows[0].ReservationID != newest.Outcomes[1].ReservationID {
		t.Fatalf("the stream's page from %d: %+v, %v", newest.Outcomes[1].Seq, at, err)
	}
	_, err = c.Resend(ctx, "acme", "billing", "r-1")
	wantProblem(t, err, http.StatusConflict, relayclient.TypeStillPending)
	job, err := c.Recover(ctx, "acme", "billing", time.Now().Add(-time.Hour), time.Now())
	if err != nil || job.State != relayclient.RecoveryRunning || job.Endpoint != "billing" || len(job.ID) != 32 {
		t.Fatalf("recover %+v, %v", job, err)
	}
	_, err = c.Recover(ctx, "acme", "billing", time.Now().Add(-time.Hour), time.Now())
	wantProblem(t, err, http.StatusConflict, relayclient.TypeRecoveryRunning)
	if got, err := c.Recovery(ctx, "acme", "billing", job.ID); err != nil || got.ID != job.ID || got.CreatedAt.IsZero() {
		t.Fatalf("recovery %+v, %v", got, err)
	}
	if erased, err := c.EraseOutcome(ctx, "acme", "b-0"); err != nil || len(erased.Dropped) != 1 || erased.Dropped[0] != "billing" {
		t.Fatalf("erase %+v, %v", erased, err)
	}

	// The test is one more row on billing alone.
	tested, err := c.TestEndpoint(ctx, "acme", "billing")
	if err != nil || tested.Endpoint != "billing" || tested.Type != "endpoint.test" || !strings.HasPrefix(tested.ReservationID, "relay.endpoint.test.billing.") {
		t.Fatalf("test %+v, %v", tested, err)
	}
	_, err = c.TestEndpoint(ctx, "acme", "audit")
	wantProblem(t, err, http.StatusConflict, relayclient.TypeEndpointDisabled)

	_, err = c.DeleteEndpoint(ctx, "acme", "billing", false)
	if p := wantProblem(t, err, http.StatusConflict, relayclient.TypeEndpointHasBacklog); p.BacklogRows != 251 {
		t.Fatalf("backlog_rows %d", p.BacklogRows)
	}
	if del, err := c.DeleteEndpoint(ctx, "acme", "billing", true); err != nil || del.DroppedRows != 251 || del.ID != "billing" {
		t.Fatalf("forced delete %+v, %v", del, err)
	}
	if del, err := c.DeleteEndpoint(ctx, "acme", "audit", false); err != nil || del.DroppedRows != 0 {
		t.Fatalf("delete %+v, %v", del, err)
	}

	link, err := c.CreateConsoleLink(ctx, "acme", relayclient.AccessRead, 10*time.Minute)
	if err != nil || !strings.Contains(link.URL, "/console/#token=") || link.Namespace != "acme" || link.Access != relayclient.AccessRead ||
		link.ExpiresAt.Before(time.Now().Add(9*time.Minute)) || link.ExpiresAt.After(time.Now().Add(11*time.Minute)) {
		t.Fatalf("console link %+v, %v", link, err)
	}
	if _, err := c.CreateConsoleLink(ctx, "acme", "admin", 0); !errors.Is(err, relayclient.ErrInvalid) {
		t.Fatalf("access admin: %v", err)
	}

	// Every operation of the contract but the metrics scrape has a call.
	var want []string
	for _, item := range apitest.Contract(t).Paths.Map() {
		for _, op := range item.Operations() {
			if op.OperationID != "metrics" {
				want = append(want, op.OperationID)
			}
		}
	}
	slices.Sort(want)
	if got := ct.operations(); !slices.Equal(got, want) {
		t.Errorf("operations called %v, want %v", got, want)
	}
}

// A token is sent on the /v1 routes, and relay's refusals of it are
// problems: none, another scope.
func TestTheTokenAndItsScopes(t *testing.T) {
	r := startRelay(t)
	anon, _ := client(t, r.url, "")
	_, err := anon.ListEndpoints(t.Context(), "acme")
	wantProblem(t, err, http.StatusUnauthorized, relayclient.TypeUnauthorized)
	if err := anon.Healthz(t.Context()); err != nil {
		t.Fatalf("healthz needs no token: %v", err)
	}

	reader, _ := client(t, r.url, r.token(httpapi.ScopeOutboxRead))
	if _, err := reader.ListEndpoints(t.Context(), "acme"); err != nil {
		t.Fatal(err)
	}
	_, err = reader.PutEndpoint(t.Context(), "acme", "billing", relayclient.EndpointConfig{URL: "http://127.0.0.1:9/hooks"})
	wantProblem(t, err, http.StatusForbidden, relayclient.TypeForbidden)
	_, err = reader.Ingest(t.Context(), "acme", committed("r-1"))
	wantProblem(t, err, http.StatusForbidden, relayclient.TypeForbidden)
	_, err = reader.Replay(t.Context(), "acme", "billing", "r-1")
	wantProblem(t, err, http.StatusForbidden, relayclient.TypeForbidden)
}

// An outcome no endpoint takes is 422 alone and no_endpoint in a list.
func TestNoEndpoint(t *testing.T) {
	r := startRelay(t)
	c, _ := client(t, r.url, r.token(httpapi.ScopeAdmin))
	_, err := c.Ingest(t.Context(), "acme", committed("r-1"))
	wantProblem(t, err, http.StatusUnprocessableEntity, relayclient.TypeNoEndpoint)
	res, err := c.IngestAll(t.Context(), "acme", []relayclient.Outcome{committed("r-1")})
	if err != nil || len(res) != 1 || res[0].Status != relayclient.StatusNoEndpoint || res[0].Type != relayclient.TypeNoEndpoint {
		t.Fatalf("%+v, %v", res, err)
	}
}

// Thousands of outcomes on a relay: every outcome stored once, and sent
// again, every one a duplicate. (TestTenThousandOutcomes counts the
// requests; the contract is checked on fewer outcomes, its validation of
// many being slow.)
func TestThousandsOfOutcomesOnARelay(t *testing.T) {
	r := startRelay(t)
	admin := registered(t, r)
	c, err := relayclient.New(r.url, relayclient.Options{Token: r.token(httpapi.ScopeOutcomesWrite)})
	if err != nil {
		t.Fatal(err)
	}
	in := outcomes("r", 2_500)
	for _, want := range []relayclient.IngestStatus{relayclient.StatusAccepted, relayclient.StatusDuplicate} {
		res, err := c.IngestAll(t.Context(), "acme", in)
		if err != nil || len(res) != len(in) || statuses(res)[want] != len(in) {
			t.Fatalf("%d results, %v, %v; want all %s", len(res), statuses(res), err, want)
		}
	}
	if n := backlogRows(t, admin, "acme", "billing"); n != 2_500 {
		t.Fatalf("%d rows pending", n)
	}
}
