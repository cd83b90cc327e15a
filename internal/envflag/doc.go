// Package envflag defines command-line flags whose defaults come from
// environment variables, as relay's RELAY_* variables do.
//
// A variable that does not parse is an error of Parse, unless the command
// line gives its flag and so overrides it. Parse refuses anything left
// after the flags, without quoting it.
package envflag
