package apitest

import (
	"context"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/hookrelay/relay/api"
)

var (
	once   sync.Once
	doc    *openapi3.T
	router routers.Router
	err    error
)

func load() {
	doc, err = openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		return
	}
	if err = doc.Validate(context.Background()); err != nil {
		return
	}
	// Match paths on any host: tests send to httptest servers and
	// example.com alike.
	doc.Servers = nil
	router, err = legacy.NewRouter(doc)
}

// Contract is the validated contract. Callers must not change it.
func Contract(t testing.TB) *openapi3.T {
	t.Helper()
	once.Do(load)
	if err != nil {
		t.Fatalf("api/openapi.yaml: %v", err)
	}
	return doc
}

// Router routes requests to the contract's operations.
func Router(t testing.TB) routers.Router {
	t.Helper()
	Contract(t)
	return router
}
