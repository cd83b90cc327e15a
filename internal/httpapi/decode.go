package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
)

// maxJSONDepth bounds nesting; an outcome is four levels deep.
const maxJSONDepth = 16

// readQuery is the request's query, or the problem of one that does not
// parse: r.URL.Query drops a pair with a bad %-escape or a ';', so
// limit=1%zz would read as no limit, and failing=tru%zz as no filter.
func readQuery(r *http.Request) (url.Values, *Problem) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, NewProblem(SlugInvalidRequest, "the query string does not parse: each name and value must be percent-encoded, pairs separated by '&'")
	}
	return q, nil
}

// readJSON reads a request body that must be exactly one strict JSON value:
// application/json, no duplicate key at any depth, no unknown field, no
// trailing data, every field of its Go type. It decodes into v, or returns
// the problem to answer.
func readJSON(r *http.Request, v any) *Problem {
	_, p := readJSONTop(r, v)
	return p
}

// readJSONTop is readJSON that also counts the members of the body's
// top-level object: encoding/json cannot tell a member sent with its zero
// value from one left out.
func readJSONTop(r *http.Request, v any) (topKeys int, p *Problem) {
	body, p := readJSONBody(r)
	if p != nil {
		return 0, p
	}
	return decodeStrictTop(body, v)
}

// readOutcomes is readJSONTop for the outcomes body, read by
// decodeOutcomesBody where it can.
func readOutcomes(r *http.Request, v *outcomesBody) (topKeys int, p *Problem) {
	body, p := readJSONBody(r)
	if p != nil {
		return 0, p
	}
	if topKeys, ok := decodeOutcomesBody(body, v); ok {
		return topKeys, nil
	}
	*v = outcomesBody{}
	return decodeStrictTop(body, v)
}

// readJSONBody reads a request body that says it is JSON.
func readJSONBody(r *http.Request) ([]byte, *Problem) {
	if p := requireJSON(r); p != nil {
		return nil, p
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		if IsTooLarge(err) {
			return nil, NewProblem(SlugBodyTooLarge, "the request body exceeds 1 MiB")
		}
		return nil, NewProblem(SlugInvalidRequest, "the request body could not be read")
	}
	return body, nil
}

// decodeStrictTop checks body strictly, then decodes it into v.
func decodeStrictTop(body []byte, v any) (topKeys int, p *Problem) {
	topKeys, p = checkStrictTop(body)
	if p != nil {
		return 0, p
	}
	return topKeys, decodeStrict(body, v)
}

// requireJSON refuses a body that does not say it is JSON.
func requireJSON(r *http.Request) *Problem {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return NewProblem(SlugUnsupportedMediaType, "send the body as application/json")
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return NewProblem(SlugUnsupportedMediaType, "the body must be UTF-8")
	}
	return nil
}

// decodeStrict decodes a body checkStrict accepted, refusing unknown fields
// and wrong types with the field's name (never its value).
func decodeStrict(body []byte, v any) *Problem {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		return nil
	}
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &typeErr) && typeErr.Field != "":
		return NewProblem(SlugInvalidRequest, fmt.Sprintf("%s must be a JSON %s", apiField(typeErr.Field), jsonType(typeErr.Type.Kind().String())))
	case errors.As(err, &typeErr):
		return NewProblem(SlugInvalidRequest, "the body must be a JSON object")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return NewProblem(SlugInvalidRequest, "unknown field "+truncate(strings.TrimPrefix(err.Error(), "json: unknown field ")))
	}
	return NewProblem(SlugInvalidRequest, "the body does not match the expected shape")
}

// apiField is a decoding error's field path as the API names it: without
// the Go names of embedded structs ("Outcome.occurred_unix_ms"). API keys
// are lower case, so a segment starting upper case is a Go name.
func apiField(path string) string {
	parts := strings.Split(path, ".")
	out := parts[:0]
	for _, p := range parts {
		if p != "" && !(p[0] >= 'A' && p[0] <= 'Z') {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return "the body"
	}
	return strings.Join(out, ".")
}

// jsonType names a Go kind as JSON calls it.
func jsonType(kind string) string {
	switch kind {
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "slice", "array":
		return "array"
	case "struct", "map", "ptr":
		return "object"
	}
	return "number of the right range"
}

// truncate bounds a client-sent name echoed in an error.
func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
