package delivery

import (
	"strconv"
	"testing"
)

func TestURLCacheParsesEachTextOnce(t *testing.T) {
	t.Parallel()
	var c urlCache
	a, err := c.parse("https://hooks.example.com/in?token=1")
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.parse("https://hooks.example.com/in?token=1")
	if err != nil || again != a {
		t.Fatalf("the same text parsed again: %p then %p (%v)", a, again, err)
	}
	other, err := c.parse("https://hooks.example.com/in?token=2")
	if err != nil || other == a || other.RawQuery != "token=2" {
		t.Fatalf("another text got %v (%v), want its own URL", other, err)
	}
	if _, err := c.parse("https://hooks.example.com/%zz"); err == nil {
		t.Fatal("a URL that does not parse was accepted")
	}
	if _, ok := c.m.Load("https://hooks.example.com/%zz"); ok {
		t.Fatal("a URL that does not parse was kept")
	}
}

func TestURLCacheIsBounded(t *testing.T) {
	t.Parallel()
	var c urlCache
	for i := range 3 * maxCachedURLs {
		if _, err := c.parse("https://hooks.example.com/" + strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	held := 0
	c.m.Range(func(any, any) bool { held++; return true })
	if held > maxCachedURLs || held == 0 {
		t.Fatalf("%d URLs held, want 1 to %d", held, maxCachedURLs)
	}
}
