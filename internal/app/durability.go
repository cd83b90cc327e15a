package app

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hookrelay/relay/internal/redisstore"
)

// DurabilityMemory is the default durability: a 202 once the master ran
// the batch.
const DurabilityMemory = "memory"

// ParseDurability reads a durability setting, "memory" or "replicas=N"
// (N ≥ 1), with the timeout of its WAIT (zero: the default).
func ParseDurability(s string, timeout time.Duration) (redisstore.Durability, error) {
	if timeout < 0 || timeout > redisstore.MaxDurabilityTimeout || (timeout != 0 && timeout < time.Millisecond) {
		return redisstore.Durability{}, fmt.Errorf("durability timeout %v must be between 1ms and %v", timeout, redisstore.MaxDurabilityTimeout)
	}
	s = strings.TrimSpace(s)
	if s == "" || s == DurabilityMemory {
		return redisstore.Durability{}, nil
	}
	v, ok := strings.CutPrefix(s, "replicas=")
	if !ok {
		return redisstore.Durability{}, errors.New(`durability must be "memory" or "replicas=N" with N at least 1`)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return redisstore.Durability{}, errors.New(`durability "replicas=N" takes a whole number N of at least 1`)
	}
	if timeout == 0 {
		timeout = redisstore.DefaultDurabilityTimeout
	}
	return redisstore.Durability{Replicas: n, Timeout: timeout}, nil
}
