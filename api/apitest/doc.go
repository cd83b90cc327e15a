// Package apitest loads api/openapi.yaml for the tests that check exchanges
// against it, once per test binary.
package apitest
