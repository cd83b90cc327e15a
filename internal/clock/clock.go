// Package clock is the time source of relay's background work. Library code
// takes a Clock so tests move time by hand instead of sleeping.
package clock

import (
	"sync"
	"time"
)

// Clock tells the current time.
type Clock interface {
	Now() time.Time
}

// System is the wall clock.
type System struct{}

// Now returns time.Now.
func (System) Now() time.Time { return time.Now() }

// Manual is a clock that moves only when told. It is safe for concurrent use.
type Manual struct {
	mu  sync.Mutex
	now time.Time
}

// NewManual returns a clock stopped at the given Unix millisecond.
func NewManual(unixMs int64) *Manual { return &Manual{now: time.UnixMilli(unixMs)} }

// Now returns the clock's time.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// Set moves the clock to the given Unix millisecond.
func (m *Manual) Set(unixMs int64) {
	m.mu.Lock()
	m.now = time.UnixMilli(unixMs)
	m.mu.Unlock()
}

// Advance moves the clock forward by d.
func (m *Manual) Advance(d time.Duration) {
	m.mu.Lock()
	m.now = m.now.Add(d)
	m.mu.Unlock()
}
