// Package gctarget sets the Go garbage collector's targets for a relay
// process where the operator has not.
//
// relay's live heap is small (a few MB) and it allocates per request and
// per webhook, so at Go's default GOGC=100 it collects every few MB: in
// the e2e benchmark a tenth of the process's CPU went to the collector.
// A higher percent collects less often for a heap that stays small. Where
// the process runs under a cgroup memory limit and GOMEMLIMIT is unset,
// the soft limit is set just under it, so the collector works harder as
// the heap nears the limit rather than the process being killed.
package gctarget
