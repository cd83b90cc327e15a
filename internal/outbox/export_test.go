package outbox

// KeptSnapshots counts the snapshots c holds for partitions whose flusher
// exited.
func KeptSnapshots(c *Coalescer) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.left)
}

// LimitKeptSnapshots sets how many snapshots c keeps at most.
func LimitKeptSnapshots(c *Coalescer, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.maxKept = n
}
