// Command relay runs the webhook relay. With no Redis configured it starts
// an embedded, in-memory miniredis for development. relay version (or
// -version) says which relay it is.
package main
