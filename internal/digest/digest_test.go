package digest

import (
	"bytes"
	"testing"

	"github.com/zeebo/blake3"
)

// Sum256 is BLAKE3's 256-bit digest whatever its reused hasher saw before.
func TestSum256IsBLAKE3(t *testing.T) {
	for _, b := range [][]byte{nil, []byte("a"), bytes.Repeat([]byte("relay"), 2000), []byte("b")} {
		if got, want := Sum256(b), blake3.Sum256(b); got != want {
			t.Fatalf("Sum256(%d bytes) = %x, want %x", len(b), got, want)
		}
	}
}

func BenchmarkSum256(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 600)
	for b.Loop() {
		Sum256(body)
	}
}
