// Package store is the contract between relay's domain and its storage: an
// ordered key/value space per partition with atomic, guarded batches.
//
// A partition is one namespace. Every key of a partition lives in one Redis
// Cluster slot, so a batch on it is one atomic step. Keys are compared as raw
// bytes; a Key is a Go string only so that it is immutable and comparable.
package store
