package delivery

import (
	"encoding/binary"

	"github.com/zeebo/blake3"
)

// backoffMs is the delay before a failing stream's next fire: 1 s *
// 2^failedFires capped at MaxBackoff, plus up to 20 % jitter drawn
// deterministically from the stream and its count of failed fires, so
// streams failing together spread out, also at the cap, while a stream's
// own schedule is reproducible.
func backoffMs(namespace, endpoint string, failedFires uint32) int64 {
	base := min(int64(1000)<<min(failedFires, 20), MaxBackoff.Milliseconds())
	h := blake3.New()
	_, _ = h.Write([]byte("relay:delivery-backoff:v1\x00" + namespace + "\x00" + endpoint + "\x00"))
	_, _ = h.Write(binary.BigEndian.AppendUint32(nil, failedFires))
	sum := h.Sum(nil)
	jitter := int64(binary.BigEndian.Uint64(sum[:8]) % uint64(base/5+1))
	return base + jitter
}
