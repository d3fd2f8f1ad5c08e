// Package shape holds the tests of the code's own shape: how large a
// type's method set may grow, and which room of the daemon may import
// which (issue "the gateway as rooms"). It has no code of its own; its
// tests read the module's sources and the compiler's export data, so a
// type that grows past its bound, or an import that runs the wrong way,
// fails `make test` rather than waiting for a reviewer.
package shape
