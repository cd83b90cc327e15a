// Package buildinfo says which relay this is: the version, commit and Go
// version the toolchain stamped into the binary.
package buildinfo
