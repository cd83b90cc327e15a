// Package outbox is the domain of relay's storage: the keys of a namespace's
// rows, the strict codecs of their values, the ingest plan (Appender) and the
// acknowledgement plan (Acks).
//
// A namespace is one store partition. Each endpoint of it is a stream with its
// own pending index, backlog and delivery timer, so one stream never waits
// on another; the sequence, the outcome log and the idempotency (seen) rows
// are shared by the streams of the namespace.
//
// Every decoder is strict: a truncated, trailing, non-canonical or
// unknown-version value is an error wrapping store.ErrCorrupt, never a panic
// and never silently accepted.
package outbox
