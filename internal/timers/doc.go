// Package timers runs due work inside a partition. A timer is a row; a worker
// claims a due timer with a lease, fires its handler, and applies the
// handler's result in one batch guarded by the leased row, so only the
// lease's owner can complete it.
package timers
