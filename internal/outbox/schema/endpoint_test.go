package schema_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/outbox/schema"
)

// A new endpoint's URL goes onto the request line as written: one that a
// URI cannot hold unencoded is refused, without echoing it; one stored
// before the rule still encodes and decodes, so its namespace stays
// readable.
func TestANewEndpointURLMustBeWrittenAsAURI(t *testing.T) {
	for _, raw := range []string{
		"https://billing.acme.example/hooks",
		"https://billing.acme.example:8443/a/b%20c?x=1&y=%2F&z=a,b;c=d:e@f!$'()*+~",
		"https://[2001:db8::1]/hooks",
		"http://127.0.0.1:9000/",
	} {
		if err := schema.ValidateNewURL(raw); err != nil {
			t.Errorf("%s refused: %v", raw, err)
		}
	}
	for name, raw := range map[string]string{
		"a request line in the query": "https://hunter2.example/w?q=x HTTP/1.0 y",
		"a space in the path":         "https://hunter2.example/a b",
		"a tab":                       "https://hunter2.example/a\tb",
		"CR LF":                       "https://hunter2.example/a?b=\r\nX-Evil: 1",
		"DEL":                         "https://hunter2.example/a\x7f",
		"not ASCII in the query":      "https://hunter2.example/a?b=é",
		"a quote":                     `https://hunter2.example/a?b="c"`,
		"angle brackets":              "https://hunter2.example/a?b=<2>",
		"a backslash":                 `https://hunter2.example/a\b`,
		"a brace":                     "https://hunter2.example/a?b={c}",
		"a pipe":                      "https://hunter2.example/a?b=c|d",
		"a caret":                     "https://hunter2.example/a?b=c^d",
		"a backtick":                  "https://hunter2.example/a?b=c`d",
		"a bad escape":                "https://hunter2.example/a?b=%zz",
		"a short escape":              "https://hunter2.example/a?b=%2",
		"a bare percent":              "https://hunter2.example/100%",
		"a fragment":                  "https://hunter2.example/a#b",
		"no url":                      "",
	} {
		err := schema.ValidateNewURL(raw)
		if !errors.Is(err, schema.ErrInvalid) {
			t.Errorf("%s: %q: %v, want ErrInvalid", name, raw, err)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the error echoes the URL: %v", name, err)
		}
	}

	stored := testEndpoint()
	stored.URL = "https://billing.acme.example/w?q=x HTTP/1.0 y"
	v, err := schema.EncodeEndpoint(&stored)
	if err != nil {
		t.Fatalf("an endpoint stored before the rule: %v", err)
	}
	if got, err := schema.DecodeEndpoint(v); err != nil || got.URL != stored.URL {
		t.Fatalf("an endpoint stored before the rule reads as %q, %v", got.URL, err)
	}
}
