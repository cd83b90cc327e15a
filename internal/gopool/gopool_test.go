package gopool

import (
	"bytes"
	"runtime"
	"sync"
	"testing"
	"time"
)

// goroutineID is the running goroutine's number, from its stack's header.
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := bytes.Cut(bytes.TrimPrefix(buf, []byte("goroutine ")), []byte(" "))
	return string(id)
}

// Functions run one after another run on goroutines kept from the ones
// before: of 200, nearly all on one already used. (Go may come before
// the last goroutine waits again, and start another.)
func TestFunctionsRunInTurnReuseTheirGoroutines(t *testing.T) {
	var p Pool
	ids := make(chan string)
	seen := map[string]bool{}
	const n = 200
	for range n {
		p.Go(func() { ids <- goroutineID() })
		seen[<-ids] = true
	}
	if len(seen) > n/2 {
		t.Fatalf("%d functions ran on %d goroutines", n, len(seen))
	}
}

// Go never waits for a busy goroutine: functions that each wait for all
// the others run at once.
func TestGoRunsFunctionsAtOnceWhenEveryGoroutineIsBusy(t *testing.T) {
	var p Pool
	const n = 8
	var all sync.WaitGroup
	all.Add(n)
	done := make(chan struct{}, n)
	for range n {
		p.Go(func() {
			all.Done()
			all.Wait()
			done <- struct{}{}
		})
	}
	for range n {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("functions waited for each other's goroutines")
		}
	}
}

// A kept goroutine given nothing for Idle exits.
func TestAKeptGoroutineExitsAfterIdle(t *testing.T) {
	exited := make(chan struct{})
	p := Pool{Idle: time.Millisecond, exited: func() { close(exited) }}
	ran := make(chan struct{})
	p.Go(func() { close(ran) })
	<-ran
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the goroutine was still kept after its idle time")
	}
}
