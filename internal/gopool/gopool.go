package gopool

import (
	"sync"
	"time"
)

// DefaultIdle is how long a kept goroutine waits for the next function.
const DefaultIdle = 10 * time.Second

// Pool keeps the goroutines its Go started while they have work, and each
// for Idle after its last. The zero Pool is ready to use.
type Pool struct {
	// Idle is how long a goroutine waits for another function before it
	// exits; DefaultIdle when zero.
	Idle time.Duration

	once sync.Once
	work chan func()
	// exited, when a test sets it, is called as a kept goroutine exits.
	exited func()
}

// Go runs f on a waiting goroutine of the pool, or on a new one when none
// waits. It never blocks.
func (p *Pool) Go(f func()) {
	p.once.Do(func() { p.work = make(chan func()) })
	select {
	case p.work <- f:
	default:
		go p.keep(f)
	}
}

func (p *Pool) keep(f func()) {
	idle := p.Idle
	if idle <= 0 {
		idle = DefaultIdle
	}
	t := time.NewTimer(idle)
	defer t.Stop()
	if p.exited != nil {
		defer p.exited()
	}
	for {
		f()
		// Not kept alive, with what it holds, while the goroutine waits.
		f = nil
		// Stopped and drained by Reset since Go 1.23: no stale tick.
		t.Reset(idle)
		select {
		case f = <-p.work:
		case <-t.C:
			return
		}
	}
}
