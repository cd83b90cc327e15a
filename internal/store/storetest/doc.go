// Package storetest is the contract suite of store.NamespaceStore,
// store.DueIndex and store.Registry. Every backend runs it unchanged:
//
//	storetest.Run(t, func(t *testing.T) storetest.Store { return newBackend(t) })
//
// Each subtest gets a fresh, isolated store from the factory and may run in
// parallel with the others.
package storetest
