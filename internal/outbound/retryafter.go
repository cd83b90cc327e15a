package outbound

import (
	"net/http"
	"strings"
	"time"
)

// maxRetryAfter caps what an endpoint may ask for: the driver's backoff tops
// out at 15 min too, so a larger value would only park the stream.
const maxRetryAfter = 15 * time.Minute

// parseRetryAfter reads a Retry-After value (RFC 9110 §10.2.3): delta-seconds,
// or an HTTP-date taken relative to now. The result is at most maxRetryAfter;
// a malformed, negative or past value gives 0, so the driver's own backoff
// decides.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if v[0] >= '0' && v[0] <= '9' {
		var secs int64
		for i := 0; i < len(v); i++ {
			c := v[i]
			if c < '0' || c > '9' {
				return 0 // "1.5", "10s", "3, 4": not delta-seconds, and not a date either
			}
			secs = secs*10 + int64(c-'0')
			if secs > int64(maxRetryAfter/time.Second) {
				// Keep scanning so that trailing junk still reads as malformed.
				secs = int64(maxRetryAfter/time.Second) + 1
			}
		}
		return min(time.Duration(secs)*time.Second, maxRetryAfter)
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	d := t.Sub(now)
	if d <= 0 {
		return 0
	}
	return min(d, maxRetryAfter)
}
