package redisstore

import "testing"

// A call signalled to lead that leaves instead passes the lead to the call
// first after it, or leaves the rounds idle: a round never waits for a
// leader that is gone.
func TestACallThatLeavesPassesOnItsLead(t *testing.T) {
	newCall := func() *roundCall { return &roundCall{lead: make(chan struct{}, 1), done: make(chan struct{})} }
	a, b := newCall(), newCall()
	l := &rounds{queue: []*roundCall{a, b}, busy: true}
	a.lead <- struct{}{}
	if !l.leave(a) {
		t.Fatal("an unsent call could not leave")
	}
	select {
	case <-b.lead:
	default:
		t.Fatal("the call now first was not signalled to lead")
	}
	if len(l.queue) != 1 || l.queue[0] != b || !l.busy {
		t.Fatalf("queue %d long, busy %v; want b alone, busy", len(l.queue), l.busy)
	}
	b.lead <- struct{}{}
	l.leave(b)
	if len(l.queue) != 0 || l.busy {
		t.Fatalf("queue %d long, busy %v after the last left; want idle", len(l.queue), l.busy)
	}
	c := newCall()
	c.sent = true
	if l.leave(c) {
		t.Error("a sent call left")
	}
}
