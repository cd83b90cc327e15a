package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
)

// Slug names a kind of problem. Its type URI, status and title are fixed:
// clients branch on the type URI, so a slug never changes meaning.
type Slug string

// The problems relay answers with; the API decisions list when each applies.
const (
	SlugUnauthorized         Slug = "unauthorized"
	SlugForbidden            Slug = "forbidden"
	SlugNotFound             Slug = "not-found"
	SlugMethodNotAllowed     Slug = "method-not-allowed"
	SlugInvalidRequest       Slug = "invalid-request"
	SlugInvalidOutcome       Slug = "invalid-outcome"
	SlugInvalidEndpoint      Slug = "invalid-endpoint"
	SlugUnsafeURL            Slug = "unsafe-url"
	SlugBodyTooLarge         Slug = "body-too-large"
	SlugUnsupportedMediaType Slug = "unsupported-media-type"
	SlugConflict             Slug = "conflict"
	SlugNoEndpoint           Slug = "no-endpoint"
	SlugTooManyEndpoints     Slug = "too-many-endpoints"
	SlugTooManyNamespaces    Slug = "too-many-namespaces"
	SlugEndpointHasBacklog   Slug = "endpoint-has-backlog"
	SlugEndpointDeleting     Slug = "endpoint-deleting"
	SlugEndpointDisabled     Slug = "endpoint-disabled"
	SlugNotPending           Slug = "not-pending"
	SlugStillPending         Slug = "still-pending"
	SlugNotDelivered         Slug = "not-delivered"
	SlugRecoveryRunning      Slug = "recovery-running"
	SlugStreamBusy           Slug = "stream-busy"
	SlugContended            Slug = "contended"
	SlugUnavailable          Slug = "unavailable"
	SlugInternal             Slug = "internal"
	SlugCannotMint           Slug = "cannot-mint"
)

// ProblemTypePrefix prefixes every problem type URI.
const ProblemTypePrefix = "urn:hookrelay:problem:"

// ContentTypeProblem is the media type of every error body.
const ContentTypeProblem = "application/problem+json"

type slugInfo struct {
	status int
	title  string
}

var slugs = map[Slug]slugInfo{
	SlugUnauthorized:         {http.StatusUnauthorized, "Unauthorized"},
	SlugForbidden:            {http.StatusForbidden, "Forbidden"},
	SlugNotFound:             {http.StatusNotFound, "Not found"},
	SlugMethodNotAllowed:     {http.StatusMethodNotAllowed, "Method not allowed"},
	SlugInvalidRequest:       {http.StatusBadRequest, "Invalid request"},
	SlugInvalidOutcome:       {http.StatusBadRequest, "Invalid outcome"},
	SlugInvalidEndpoint:      {http.StatusBadRequest, "Invalid endpoint"},
	SlugUnsafeURL:            {http.StatusUnprocessableEntity, "Unsafe endpoint URL"},
	SlugBodyTooLarge:         {http.StatusRequestEntityTooLarge, "Request body too large"},
	SlugUnsupportedMediaType: {http.StatusUnsupportedMediaType, "Unsupported media type"},
	SlugConflict:             {http.StatusConflict, "Conflicting outcome"},
	SlugNoEndpoint:           {http.StatusUnprocessableEntity, "No endpoint takes this outcome"},
	SlugTooManyEndpoints:     {http.StatusUnprocessableEntity, "Too many endpoints"},
	SlugTooManyNamespaces:    {http.StatusUnprocessableEntity, "Too many namespaces"},
	SlugEndpointHasBacklog:   {http.StatusConflict, "Endpoint has a backlog"},
	SlugEndpointDeleting:     {http.StatusConflict, "Endpoint is being deleted"},
	SlugEndpointDisabled:     {http.StatusConflict, "Endpoint is disabled"},
	SlugNotPending:           {http.StatusNotFound, "Outcome not pending"},
	SlugStillPending:         {http.StatusConflict, "Outcome still pending"},
	SlugNotDelivered:         {http.StatusConflict, "Outcome not delivered to this endpoint"},
	SlugRecoveryRunning:      {http.StatusConflict, "Recovery running"},
	SlugStreamBusy:           {http.StatusConflict, "Stream busy"},
	SlugContended:            {http.StatusServiceUnavailable, "Namespace contended"},
	SlugUnavailable:          {http.StatusServiceUnavailable, "Service unavailable"},
	SlugInternal:             {http.StatusInternalServerError, "Internal error"},
	SlugCannotMint:           {http.StatusConflict, "Relay cannot mint tokens"},
}

// retryAfter is the Retry-After, in seconds, of the problems a client
// should retry as they are: a lost race clears at once; a Redis restart or
// failover takes a little longer.
var retryAfter = map[Slug]string{
	SlugContended:   "1",
	SlugStreamBusy:  "1",
	SlugUnavailable: "2",
}

// Slugs returns every known slug, sorted.
func Slugs() []Slug {
	out := make([]Slug, 0, len(slugs))
	for s := range slugs {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Type is the slug's stable type URI, also used in a list's results.
func (s Slug) Type() string { return ProblemTypePrefix + string(s) }

// Status is the slug's HTTP status; 0 for an unknown slug.
func (s Slug) Status() int { return slugs[s].status }

// Title is the slug's fixed title; empty for an unknown slug.
func (s Slug) Title() string { return slugs[s].title }

// Problem is an RFC 9457 problem. Detail is shown to the client: it must not
// carry secrets, payload values or internal causes (log those instead).
type Problem struct {
	Slug     Slug
	Status   int
	Title    string
	Detail   string
	Instance string
	// Ext holds extension members such as "errors" or "backlog_rows". They
	// cannot replace a standard member.
	Ext map[string]any
}

// NewProblem returns the problem of slug with its fixed status and title.
// An unknown slug is a programming error; it yields the internal problem
// rather than an invented type URI.
func NewProblem(slug Slug, detail string) *Problem {
	info, ok := slugs[slug]
	if !ok {
		slug, info, detail = SlugInternal, slugs[SlugInternal], ""
	}
	return &Problem{Slug: slug, Status: info.status, Title: info.title, Detail: detail}
}

// With sets an extension member and returns p, for chaining.
func (p *Problem) With(name string, value any) *Problem {
	if p.Ext == nil {
		p.Ext = make(map[string]any)
	}
	p.Ext[name] = value
	return p
}

// Error makes a Problem usable as an error, so decoders and validators can
// return the exact problem the client should see.
func (p *Problem) Error() string {
	if p.Detail == "" {
		return string(p.Slug)
	}
	return string(p.Slug) + ": " + p.Detail
}

// problemBody is the standard members, in the order RFC 9457 lists them.
type problemBody struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail,omitempty"`
	Instance  string `json:"instance,omitempty"`
	RequestID string `json:"request_id,omitempty"`
}

var reservedMembers = []string{"type", "title", "status", "detail", "instance", "request_id"}

// status is the status p is answered with: its own, else its slug's; never
// one that is not an error.
func (p *Problem) status() int {
	for _, s := range []int{p.Status, p.Slug.Status()} {
		if s >= 400 && s <= 599 {
			return s
		}
	}
	return http.StatusInternalServerError
}

// marshal encodes p with the standard members first, then the extensions
// in name order.
func (p *Problem) marshal(requestID string) ([]byte, error) {
	title := p.Title
	if title == "" {
		title = p.Slug.Title()
	}
	std, err := json.Marshal(problemBody{
		Type:      p.Slug.Type(),
		Title:     title,
		Status:    p.status(),
		Detail:    p.Detail,
		Instance:  p.Instance,
		RequestID: requestID,
	})
	if err != nil {
		return nil, err
	}
	if len(p.Ext) == 0 {
		return std, nil
	}
	names := make([]string, 0, len(p.Ext))
	for name := range p.Ext {
		if !slices.Contains(reservedMembers, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var buf bytes.Buffer
	buf.Write(std[:len(std)-1])
	for _, name := range names {
		k, err := json.Marshal(name)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(p.Ext[name])
		if err != nil {
			return nil, err
		}
		buf.WriteByte(',')
		buf.Write(k)
		buf.WriteByte(':')
		buf.Write(v)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// WriteProblem answers with p as application/problem+json, carrying the
// request id the middleware assigned. Contended, stream-busy and unavailable
// answers carry Retry-After (retryAfter). A nil p is the internal problem.
func WriteProblem(w http.ResponseWriter, r *http.Request, p *Problem) {
	if p == nil {
		p = NewProblem(SlugInternal, "")
	}
	var id string
	if r != nil {
		id = RequestID(r.Context())
	}
	if id == "" {
		id = w.Header().Get(HeaderRequestID)
	}
	body, err := p.marshal(id)
	if err != nil {
		// Only an extension can fail to encode; drop it rather than the answer.
		body, _ = (&Problem{Slug: p.Slug, Status: p.Status, Title: p.Title, Detail: p.Detail, Instance: p.Instance}).marshal(id)
	}
	h := w.Header()
	h.Set("Content-Type", ContentTypeProblem)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Del("Content-Length")
	if s, ok := retryAfter[p.Slug]; ok {
		h.Set("Retry-After", s)
	}
	w.WriteHeader(p.status())
	_, _ = w.Write(append(body, '\n'))
}

// WriteJSON answers with v as application/json. A value that cannot be
// encoded is a programming error; the client gets the internal problem.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		WriteProblem(w, nil, NewProblem(SlugInternal, ""))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
