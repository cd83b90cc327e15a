// Package verifycheck holds the tests of the public hookverify module that
// need relay itself: its signer, its key list handler, its published
// signature vectors. hookverify is a module of its own and cannot import
// relay's internal packages, so these tests live in relay's module.
package verifycheck
