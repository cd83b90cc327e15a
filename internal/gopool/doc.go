// Package gopool runs functions on goroutines that wait a while for the
// next one after each returns. A function run often on a fresh goroutine
// grows that goroutine's stack from its smallest each time (a copy of the
// stack per doubling); run on a kept goroutine, it finds the stack grown.
package gopool
