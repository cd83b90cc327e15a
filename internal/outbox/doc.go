// Package outbox is the domain of relay's storage: the ingest plan and its
// group commit (Appender, Coalescer), the acknowledgement plan (Acks),
// operators' changes and history (Admin), and the timer handlers that
// sweep the outbox and run recoveries. What it stores, every key and value,
// is package schema's.
//
// A namespace is one store partition. Each endpoint of it is a stream with its
// own pending index, backlog and delivery timer, so one stream never waits
// on another; the sequence, the outcome log and the idempotency (seen) rows
// are shared by the streams of the namespace.
package outbox
