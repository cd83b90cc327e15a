package outbound

import (
	"net/http"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"0", 0},
		{"1", time.Second},
		{" 120 ", 2 * time.Minute},
		{"900", 15 * time.Minute},
		{"901", 15 * time.Minute},
		{"99999999999999999999999999", 15 * time.Minute},
		{"99999999999999999999999999x", 0},
		{"-5", 0},
		{"+5", 0},
		{"1.5", 0},
		{"10s", 0},
		{"3, 4", 0},
		{"", 0},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(90 * time.Second).Format(time.RFC850), 90 * time.Second},
		{now.Add(90 * time.Second).Format(time.ANSIC), 90 * time.Second},
		{now.Add(2 * time.Hour).Format(http.TimeFormat), 15 * time.Minute},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{now.Format(http.TimeFormat), 0},
		{"Sun, 01 Mar 2026 12:01:30 +0100", 0}, // not GMT: malformed
	} {
		if got := parseRetryAfter(tc.in, now); got != tc.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
