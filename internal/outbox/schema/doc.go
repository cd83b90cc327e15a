// Package schema is relay's stored format: the key and value of every row
// the outbox writes to a namespace's partition (of a timer row, the state;
// the key and its envelope are package timers'), the Go types they hold,
// and the codecs and validation that turn one into the other. Every decoder
// is strict: a truncated, trailing, non-canonical or unknown-version value
// is an error wrapping store.ErrCorrupt, never a panic. A change here
// changes what Redis holds, so rows already written must still read, or
// the format version (redisstore.Format) must change with it.
package schema
