// Package api holds relay's REST contract.
package api

import _ "embed"

// OpenAPI is api/openapi.yaml, relay's HTTP API as an OpenAPI 3.1 document,
// embedded so that other packages' tests can load it.
//
//go:embed openapi.yaml
var OpenAPI []byte
