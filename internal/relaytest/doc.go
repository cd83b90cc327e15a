// Package relaytest runs the real relay binary for tests: it builds the
// binary once per test process, starts, stops and kills relay processes on
// free loopback addresses, and receives and verifies their webhooks. The
// end-to-end tests of cmd/relay and the fault suite share it; the
// redis-servers they break are redistest's. Its waits (Eventually, Poll)
// serve every test that waits on a relay, in process or not.
package relaytest
