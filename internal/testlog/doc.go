// Package testlog is what tests read output through when other goroutines or
// processes write it: a logger's lines, a child process's stderr.
package testlog
