package relayclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// Ingest posts one outcome to namespace ns. It answers StatusAccepted or
// StatusDuplicate; a different outcome under the same reservation id is a
// *Problem of TypeConflict (409), an outcome no endpoint takes one of
// TypeNoEndpoint (422), a broken field rule one of TypeInvalidOutcome (400).
// A 503 is retried as the package says.
func (c *Client) Ingest(ctx context.Context, ns string, o Outcome) (IngestResult, error) {
	if err := checkNamespace("ingest", ns); err != nil {
		return IngestResult{}, err
	}
	res, err := c.ingest(ctx, ns, o, []Outcome{o})
	if err != nil {
		return IngestResult{}, err
	}
	return res[0], nil
}

// IngestAll posts any number of outcomes to namespace ns, as lists of at
// most MaxOutcomesPerRequest, one request after another, and returns one
// result per outcome in input order: accepted, duplicate, conflict or
// no_endpoint. Each request answered 503 is retried as the package says,
// with the same bytes, so what a first attempt stored answers duplicate.
//
// When a request fails for good, IngestAll stops and returns the results
// of the requests before it with the error: results[i] answers outcomes[i]
// for every i < len(results), and those are settled. Outcomes from
// len(results) on were not all stored, and a failed request may have stored
// some of its list (a 503 partway through); send outcomes[len(results):]
// again as they are, and what was stored answers duplicate. An
// invalid-outcome *Problem stored nothing of its request; its Errors index
// into outcomes.
//
// No outcome is no request: nil, nil.
func (c *Client) IngestAll(ctx context.Context, ns string, outcomes []Outcome) ([]IngestResult, error) {
	if err := checkNamespace("ingest", ns); err != nil {
		return nil, err
	}
	var results []IngestResult
	for off := 0; off < len(outcomes); off += MaxOutcomesPerRequest {
		chunk := outcomes[off:min(off+MaxOutcomesPerRequest, len(outcomes))]
		res, err := c.ingest(ctx, ns, outcomeList{chunk}, chunk)
		if err != nil {
			var p *Problem
			if errors.As(err, &p) {
				for i := range p.Errors {
					p.Errors[i].Index += off
				}
			}
			return results, err
		}
		if results == nil {
			results = make([]IngestResult, 0, len(outcomes))
		}
		results = append(results, res...)
	}
	return results, nil
}

// outcomeList is a request's list of outcomes, its body.
type outcomeList struct {
	Outcomes []Outcome `json:"outcomes"`
}

// ingest sends body, the outcomes sent, and checks that the answer has one
// result per outcome, in their order.
func (c *Client) ingest(ctx context.Context, ns string, body any, sent []Outcome) ([]IngestResult, error) {
	a, err := c.do(ctx, call{
		op: "ingest", method: http.MethodPost, path: "/v1/namespaces/" + ns + "/outcomes",
		body: body, auth: true, retry: true,
	})
	if err != nil {
		return nil, err
	}
	var out struct {
		Results []IngestResult `json:"results"`
	}
	if err := decode("ingest", a, &out); err != nil {
		return nil, err
	}
	if len(out.Results) != len(sent) {
		return nil, fmt.Errorf("relayclient: ingest: the answer holds %d results for %d outcomes", len(out.Results), len(sent))
	}
	for i, r := range out.Results {
		if r.ReservationID != sent[i].ReservationID {
			return nil, fmt.Errorf("relayclient: ingest: result %d names another reservation id than its outcome", i)
		}
	}
	return out.Results, nil
}
