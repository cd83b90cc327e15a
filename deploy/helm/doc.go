// Package helm holds the tests of relay's Helm chart (relay/): rendered
// with the Helm SDK, linted, and every manifest decoded strictly into the
// Kubernetes API types. It is a module of its own so that relay's module
// does not take in Helm and Kubernetes.
package helm
