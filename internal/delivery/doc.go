// Package delivery delivers each stream's outcomes to its endpoint: the
// outcome-delivery timer handler (one stream's fire) and the driver that
// fires many streams at once.
package delivery
