package relayclient

import (
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// The problem types relay answers with (Problem.Type). They are stable:
// branch on them, never on Title or Detail.
const (
	TypeUnauthorized         = "urn:hookrelay:problem:unauthorized"
	TypeForbidden            = "urn:hookrelay:problem:forbidden"
	TypeNotFound             = "urn:hookrelay:problem:not-found"
	TypeMethodNotAllowed     = "urn:hookrelay:problem:method-not-allowed"
	TypeInvalidRequest       = "urn:hookrelay:problem:invalid-request"
	TypeInvalidOutcome       = "urn:hookrelay:problem:invalid-outcome"
	TypeInvalidEndpoint      = "urn:hookrelay:problem:invalid-endpoint"
	TypeUnsafeURL            = "urn:hookrelay:problem:unsafe-url"
	TypeBodyTooLarge         = "urn:hookrelay:problem:body-too-large"
	TypeUnsupportedMediaType = "urn:hookrelay:problem:unsupported-media-type"
	TypeConflict             = "urn:hookrelay:problem:conflict"
	TypeNoEndpoint           = "urn:hookrelay:problem:no-endpoint"
	TypeTooManyEndpoints     = "urn:hookrelay:problem:too-many-endpoints"
	TypeTooManyNamespaces    = "urn:hookrelay:problem:too-many-namespaces"
	TypeEndpointHasBacklog   = "urn:hookrelay:problem:endpoint-has-backlog"
	TypeEndpointDeleting     = "urn:hookrelay:problem:endpoint-deleting"
	TypeEndpointDisabled     = "urn:hookrelay:problem:endpoint-disabled"
	TypeNotPending           = "urn:hookrelay:problem:not-pending"
	TypeStillPending         = "urn:hookrelay:problem:still-pending"
	TypeNotDelivered         = "urn:hookrelay:problem:not-delivered"
	TypeRecoveryRunning      = "urn:hookrelay:problem:recovery-running"
	TypeStreamBusy           = "urn:hookrelay:problem:stream-busy"
	TypeContended            = "urn:hookrelay:problem:contended"
	TypeUnavailable          = "urn:hookrelay:problem:unavailable"
	TypeInternal             = "urn:hookrelay:problem:internal"
	TypeCannotMint           = "urn:hookrelay:problem:cannot-mint"
)

// Problem is an answer that is not 2xx: relay's RFC 9457 problem, or, when
// the body is not one (a proxy's page, garbage), the status alone with its
// standard text as Title. Its fields come from the server; the client adds
// none of the request's.
type Problem struct {
	// Status is the HTTP status of the answer (not the body's "status",
	// which a problem may misstate).
	Status int `json:"-"`
	// Type is a Type* constant; empty when the body was not a problem.
	Type      string `json:"type"`
	Title     string `json:"title"`
	Detail    string `json:"detail"`
	Instance  string `json:"instance"`
	RequestID string `json:"request_id"`
	// Errors names the broken outcomes of an invalid-outcome list. After
	// IngestAll, Index is into the slice given to it.
	Errors []OutcomeError `json:"errors"`
	// BacklogRows counts an endpoint's pending rows (endpoint-has-backlog).
	BacklogRows uint64 `json:"backlog_rows"`
	// RetryAfter is the answer's Retry-After; -1 when it had none or it did
	// not parse.
	RetryAfter time.Duration `json:"-"`
}

// OutcomeError names one broken outcome of a list.
type OutcomeError struct {
	Index  int    `json:"index"`
	Detail string `json:"detail"`
}

// maxErrorDetail bounds the detail an error string repeats: the whole of it
// stays in Problem.Detail.
const maxErrorDetail = 512

// Error is "relayclient: <status> <slug>: <detail>", the slug being the
// type's last part; a problem without a type shows its title.
func (p *Problem) Error() string {
	var b strings.Builder
	b.WriteString("relayclient: ")
	b.WriteString(strconv.Itoa(p.Status))
	name := strings.TrimPrefix(p.Type, typePrefix)
	if p.Type == "" || name == p.Type {
		name = p.Title
	}
	if name = printable(name, 64); name != "" {
		b.WriteString(" ")
		b.WriteString(name)
	}
	if d := printable(p.Detail, maxErrorDetail); d != "" {
		b.WriteString(": ")
		b.WriteString(d)
	}
	return b.String()
}

const typePrefix = "urn:hookrelay:problem:"

// ProblemType is the type of the *Problem err wraps; empty when err holds
// none.
func ProblemType(err error) string {
	var p *Problem
	if errors.As(err, &p) {
		return p.Type
	}
	return ""
}

// retryable reports whether relay asks for this request again as it is.
func (p *Problem) retryable() bool {
	return p.Status == http.StatusServiceUnavailable || p.Type == TypeStreamBusy
}

// problemOf reads a non-2xx answer. A body that is not a problem leaves
// Type empty; what it said is dropped, since it may echo the request.
func problemOf(a *answer, now time.Time) *Problem {
	p := &Problem{}
	if mt, _, _ := mime.ParseMediaType(a.header.Get("Content-Type")); mt == "application/problem+json" {
		if json.Unmarshal(a.body, p) != nil {
			p = &Problem{}
		}
	}
	p.Status = a.status
	if p.Type == "" && p.Title == "" {
		p.Title = http.StatusText(a.status)
	}
	p.RetryAfter = parseRetryAfter(a.header.Get("Retry-After"), now)
	return p
}

// printable is s cut to at most n bytes, with control characters dropped,
// so a hostile server cannot forge lines in a caller's log.
func printable(s string, n int) string {
	var b strings.Builder
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) {
			continue
		}
		if b.Len()+utf8.RuneLen(r) > n {
			b.WriteString("…")
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}
