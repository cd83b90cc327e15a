//go:build !unix

package delivery

import "time"

// processCPU is not measured here; the benchmark reports 0.
func processCPU() time.Duration { return 0 }
