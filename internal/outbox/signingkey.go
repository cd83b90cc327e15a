package outbox

import "github.com/hookrelay/relay/internal/outbox/schema"

// planSigningKeys is the keys a put of a standard-webhooks-v1a endpoint
// stores: the current ones kept; one generated for an endpoint that has none;
// on rotate, a new one first and the current one still signing beside it
// until the next rotation, as a new secret keeps the old one.
func planSigningKeys(prior *schema.Endpoint, rotate bool) ([]schema.SigningKey, error) {
	var current []schema.SigningKey
	if prior != nil && prior.Scheme == schema.SchemeStandardWebhooksV1a {
		current = prior.SigningKeys
	}
	if len(current) > 0 && !rotate {
		return current, nil
	}
	gen, err := schema.NewSigningKey()
	if err != nil {
		return nil, err
	}
	if len(current) == 0 {
		return []schema.SigningKey{gen}, nil
	}
	return []schema.SigningKey{gen, current[0]}, nil
}
