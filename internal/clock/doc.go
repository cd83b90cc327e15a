// Package clock is the time source of relay's background work. Library code
// takes a Clock so tests move time by hand instead of sleeping.
package clock
