// Package signing signs webhook attempts: mkit-hook v2 with relay's
// Ed25519 key, Standard Webhooks v1 with an endpoint's secrets and v1a with
// its key pairs. It also holds relay's signing keys and the key list it
// publishes for receivers. It signs bytes and sends nothing, with time and
// randomness passed in so tests are deterministic.
package signing
