// Package clientcheck holds the tests of the public relayclient module that
// need relay itself: a relay served in the test, the API contract, and the
// constants the client mirrors. relayclient is a module of its own and
// cannot import relay's internal packages, so these tests live in relay's
// module.
package clientcheck
