package delivery

import (
	"bytes"
	"runtime"
	"testing"
	"time"
)

// goroutineID is the id runtime.Stack prints for the calling goroutine.
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := bytes.Cut(bytes.TrimPrefix(buf, []byte("goroutine ")), []byte(" "))
	return string(id)
}

// within fails the test when c does not deliver in a long while: a guard
// against a hung test, not a timing assertion.
func within[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: nothing after 10s", what)
		var zero T
		return zero
	}
}

func TestWorkersReuseAFreeWorker(t *testing.T) {
	t.Parallel()
	parked := make(chan struct{}, 1)
	w := &workers{parked: func() { parked <- struct{}{} }}
	ids := make(chan string, 1)
	w.run(func() { ids <- goroutineID() })
	first := within(t, ids, "first call")
	within(t, parked, "first worker free")
	w.run(func() { ids <- goroutineID() })
	if second := within(t, ids, "second call"); second != first {
		t.Fatalf("second call ran on goroutine %s, want the free worker %s", second, first)
	}
}

func TestWorkersStartAnotherWhileACallHangs(t *testing.T) {
	t.Parallel()
	w := &workers{}
	hang, hung := make(chan struct{}), make(chan string, 1)
	t.Cleanup(func() { close(hang) })
	w.run(func() { hung <- goroutineID(); <-hang })
	first := within(t, hung, "hanging call")
	ids := make(chan string, 1)
	w.run(func() { ids <- goroutineID() })
	if second := within(t, ids, "call beside the hanging one"); second == first {
		t.Fatalf("the second call ran on the hanging call's goroutine %s", first)
	}
}

func TestWorkersEndWhenIdle(t *testing.T) {
	t.Parallel()
	ended := make(chan struct{}, 1)
	w := &workers{idleFor: time.Millisecond, ended: func() { ended <- struct{}{} }}
	ran := make(chan string, 1)
	w.run(func() { ran <- goroutineID() })
	first := within(t, ran, "call")
	within(t, ended, "idle worker's end")
	w.mu.Lock()
	free := len(w.idle)
	w.mu.Unlock()
	if free != 0 {
		t.Fatalf("%d workers free after the only one ended", free)
	}
	w.run(func() { ran <- goroutineID() })
	if again := within(t, ran, "call after the end"); again == first {
		t.Fatalf("a call ran on the ended worker %s", first)
	}
}
