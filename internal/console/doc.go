// Package console is relay's operator console: static HTML, CSS and
// JavaScript modules embedded in the binary and served at /console/. The
// pages call the JSON API with the operator's bearer token, so the console
// adds no session of its own.
package console
