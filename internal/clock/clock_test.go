package clock_test

import (
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/clock"
)

func TestSteadyFollowsItsSourceForwardAndNeverGoesBack(t *testing.T) {
	src := clock.NewManual(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixMilli())
	s := clock.NewSteady(src)
	first := s.Now()
	if !first.Equal(src.Now()) {
		t.Fatalf("first reading %v, want the source's %v", first, src.Now())
	}
	src.Advance(10 * time.Minute)
	ahead := s.Now()
	if !ahead.Equal(src.Now()) {
		t.Fatalf("after a step forward: %v, want the source's %v", ahead, src.Now())
	}
	// Stepped back: the reading stays at or after the last one.
	src.Advance(-10 * time.Minute)
	back := s.Now()
	if back.Before(ahead) {
		t.Fatalf("after a step back: %v, before the last reading %v", back, ahead)
	}
	if back.Sub(ahead) > time.Minute {
		t.Fatalf("after a step back: %v, far beyond the last reading %v", back, ahead)
	}
	// Once the source is past it again, the source rules.
	src.Advance(time.Hour)
	if got := s.Now(); !got.Equal(src.Now()) {
		t.Fatalf("once the source caught up: %v, want %v", got, src.Now())
	}
}
