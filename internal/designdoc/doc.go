// Package designdoc keeps docs/design.md true to the code. Its tests read
// the design and fail when a file or function a rule names is not there,
// or when a package imports one of relay's that the design's import table
// does not list. It holds no code of its own: the design is the one place
// these facts are kept, and the tests only check it.
package designdoc
