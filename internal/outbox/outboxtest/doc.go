// Package outboxtest holds the fixtures of tests that build on the outbox:
// valid outcomes and stored endpoints.
package outboxtest
