package outbox

import (
	"bytes"
	"testing"

	"github.com/zeebo/blake3"
)

// sum256 is BLAKE3's 256-bit digest whatever its reused hasher saw before.
func TestSum256IsBLAKE3(t *testing.T) {
	for _, b := range [][]byte{nil, []byte("a"), bytes.Repeat([]byte("relay"), 2000), []byte("b")} {
		if got, want := sum256(b), blake3.Sum256(b); got != want {
			t.Fatalf("sum256(%d bytes) = %x, want %x", len(b), got, want)
		}
	}
}
