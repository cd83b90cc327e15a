package bench

// The bench's endpoints: registered at the receiver, each at a path of its
// own, removed when measured, and relay's refusal of one past the limit.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"time"

	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox/schema"
)

// refusedPhase is the row of a phase relay refused the endpoints of.
func refusedPhase(name string, e int, limit *endpointLimitError) phaseResult {
	return phaseResult{
		Name: name, Endpoints: e, Refused: "refused: limit " + limit.max,
		Delivered: -1, BacklogPeak: -1, Commands: -1, Bytes: -1, WebhookRate: -1, SelfCPU: -1, RelayCPU: -1, RedisCPU: -1,
	}
}

// endpointLimitError is relay's refusal of an endpoint past its
// namespace's limit, max endpoints ("?" when its answer did not say).
type endpointLimitError struct{ max, detail string }

func (e *endpointLimitError) Error() string { return "too many endpoints: " + e.detail }

// limitInDetail finds the limit in relay's too-many-endpoints detail, "a
// namespace holds at most N endpoints".
var limitInDetail = regexp.MustCompile(`at most (\d+) endpoints`)

// putEndpoint registers ep, pointing at the receiver at a path of its own.
func (b *bencher) putEndpoint(ctx context.Context, ep benchEndpointRef, enabled bool) error {
	path := "/" + ep.ns
	if ep.id != benchEndpoint {
		path += "/" + ep.id
	}
	body := map[string]any{
		"url":           b.recv.url + path,
		"scheme":        b.cfg.scheme,
		"enabled":       enabled,
		"max_in_flight": b.cfg.maxInFlight,
	}
	if b.cfg.scheme == string(schema.SchemeStandardWebhooks) {
		secret, err := schema.NewSecret()
		if err != nil {
			return err
		}
		body["secret"] = string(secret)
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	code, answer, err := b.call(ctx, http.MethodPut, "/v1/namespaces/"+ep.ns+"/endpoints/"+ep.id, raw)
	if err != nil {
		return fmt.Errorf("register endpoint %s of %s: %w", ep.id, ep.ns, err)
	}
	if code != http.StatusOK && code != http.StatusCreated {
		var problem struct{ Type, Detail string }
		_ = json.Unmarshal(answer, &problem)
		if code == http.StatusUnprocessableEntity && problem.Type == httpapi.ProblemTypePrefix+string(httpapi.SlugTooManyEndpoints) {
			limit := &endpointLimitError{max: "?", detail: problem.Detail}
			if m := limitInDetail.FindStringSubmatch(problem.Detail); m != nil {
				limit.max = m[1]
			}
			return limit
		}
		hint := ""
		if code == http.StatusUnprocessableEntity {
			hint = " (relay must allow webhooks to 127.0.0.1/32: RELAY_ALLOW_CIDRS)"
		}
		return fmt.Errorf("register endpoint %s of %s: HTTP %d %s%s", ep.id, ep.ns, code, bytes.TrimSpace(answer), hint)
	}
	b.registered = append(b.registered, ep)
	return nil
}

// deleteEndpoints drops eps, rows included.
func (b *bencher) deleteEndpoints(ctx context.Context, eps []benchEndpointRef) error {
	var errs []error
	for _, ep := range eps {
		code, answer, err := b.call(ctx, http.MethodDelete, "/v1/namespaces/"+ep.ns+"/endpoints/"+ep.id+"?force=true", nil)
		if err == nil && code != http.StatusOK && code != http.StatusNotFound {
			err = fmt.Errorf("HTTP %d %s", code, bytes.TrimSpace(answer))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("delete endpoint %s of %s: %w", ep.id, ep.ns, err))
		}
	}
	return errors.Join(errs...)
}

// deleteRegistered drops what the run registered on a -target relay.
func (b *bencher) deleteRegistered(log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := b.deleteEndpoints(ctx, b.registered)
	if err == nil && len(b.registered) > 0 {
		log.Info("bench endpoints deleted", "endpoints", len(b.registered))
	}
	return err
}

// call sends one API request and reads the whole answer.
func (b *bencher) call(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+b.token)
	resp, err := b.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return 0, nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, answer, err
}
