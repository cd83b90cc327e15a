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

// Steady is a clock that never goes backward. It follows its source forward;
// when the source steps back (an NTP step, an operator's date command), it
// goes on from its last reading at the pace of the monotonic clock until the
// source catches up. Relay dates leases and backoffs with it, so a wall
// clock stepped back does not leave rows waiting for it to come round again.
// It is safe for concurrent use.
type Steady struct {
	src Clock

	mu       sync.Mutex
	last     time.Time // the last reading returned, without monotonic part
	lastMono time.Time // time.Now at that reading, for its monotonic part
}

// NewSteady returns a Steady clock over src.
func NewSteady(src Clock) *Steady { return &Steady{src: src} }

// Now returns the source's time, or, if that is earlier, the last reading
// plus the monotonic time elapsed since.
func (s *Steady) Now() time.Time {
	// Round(0) drops the monotonic reading, so that comparisons are of wall
	// times: two readings that both carry one compare by it instead.
	wall := s.src.Now().Round(0)
	mono := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.lastMono.IsZero() {
		if floor := s.last.Add(mono.Sub(s.lastMono)); wall.Before(floor) {
			wall = floor
		}
	}
	s.last, s.lastMono = wall, mono
	return wall
}
