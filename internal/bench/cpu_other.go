//go:build !unix

package bench

import (
	"errors"
	"time"
)

// selfCPU is unknown where there is no getrusage.
func selfCPU() (time.Duration, error) {
	return 0, errors.New("no getrusage on this system")
}
