package relayclient

import "time"

// Kind is what an outcome reports; an endpoint's Kinds filter on it.
type Kind string

// The outcome kinds.
const (
	KindCommitted  Kind = "committed"
	KindAborted    Kind = "aborted"
	KindExpired    Kind = "expired"
	KindReadServed Kind = "read_served"
)

// Operator event kinds: an endpoint whose Kinds name them receives relay's
// events about the namespace's endpoints (see Event); KindEvents takes
// them all. An endpoint without one receives none.
const (
	KindEvents            Kind = "relay.*"
	KindEndpointDisabled  Kind = "relay.endpoint.disabled"
	KindEndpointFailing   Kind = "relay.endpoint.failing"
	KindEndpointRecovered Kind = "relay.endpoint.recovered"
	KindEndpointGone      Kind = "relay.endpoint.gone"
)

// Event is an operator event relay appended about one endpoint, as an
// outcome's story shows it and as the event webhook's data holds it.
type Event struct {
	// Type is "endpoint.disabled", "endpoint.failing",
	// "endpoint.recovered", "endpoint.gone", or "endpoint.test" for a test
	// an operator asked for (TestEndpoint).
	Type     string `json:"type"`
	Endpoint string `json:"endpoint"`
	// Reason is why a disabled endpoint is: "failing" or "gone".
	Reason string `json:"reason,omitempty"`
	// FailingSinceUnixMs is when its calls began failing.
	FailingSinceUnixMs int64 `json:"failing_since_unix_ms,omitempty"`
	// LastStatus and LastError are the last failed call's HTTP status and
	// error class.
	LastStatus int    `json:"last_status,omitempty"`
	LastError  string `json:"last_error,omitempty"`
}

// Outcome is the terminal result of one reservation, as a producer posts
// it: exactly one of Committed, Aborted, Expired and ReadServed is set.
// ReservationID is its idempotency key in the namespace: 1 to 128 of
// [A-Za-z0-9._:-], not starting "s:". relay checks every field rule; the
// client checks none of them.
type Outcome struct {
	ReservationID string `json:"reservation_id"`
	// Repository is printable UTF-8 of 1 to 256 bytes.
	Repository string `json:"repository"`
	// OccurredUnixMs is when the reservation ended, in Unix milliseconds:
	// positive, and at most 5 minutes past relay's clock.
	OccurredUnixMs int64       `json:"occurred_unix_ms"`
	Committed      *Committed  `json:"committed,omitempty"`
	Aborted        *Aborted    `json:"aborted,omitempty"`
	Expired        *Expired    `json:"expired,omitempty"`
	ReadServed     *ReadServed `json:"read_served,omitempty"`
	// Event is set, and the rest but ReservationID and OccurredUnixMs
	// empty, on an operator event relay appended; relay refuses an
	// outcome posted with one.
	Event *Event `json:"event,omitempty"`
}

// Committed: the reservation's writes were stored.
type Committed struct {
	BytesStored uint64 `json:"bytes_stored"`
	NewToRepo   uint64 `json:"new_to_repo"`
	NewToStore  uint64 `json:"new_to_store"`
	// Refs are the refs the commit moved, at most 64; none is left out
	// (relay refuses null).
	Refs []Ref `json:"refs,omitempty"`
}

// Ref is one ref a commit moved: New is its new target (64 lowercase hex),
// or Deleted is true and New empty.
type Ref struct {
	Name    string `json:"name"`
	New     string `json:"new,omitempty"`
	Deleted bool   `json:"deleted,omitempty"`
}

// Aborted: the reservation was abandoned. Reason is a token of 1 to 64 of
// [a-z0-9_.-]; Detail is UTF-8 of at most 512 bytes.
type Aborted struct {
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
}

// Expired: the reservation timed out. It carries no fields.
type Expired struct{}

// ReadServed: an object was read. Object is its 32-byte id in lowercase hex.
type ReadServed struct {
	Object      string `json:"object"`
	BytesServed uint64 `json:"bytes_served"`
}

// IngestStatus is what became of one ingested outcome.
type IngestStatus string

// The statuses of IngestResult.
const (
	// StatusAccepted: stored now.
	StatusAccepted IngestStatus = "accepted"
	// StatusDuplicate: the same outcome was stored before (or by an earlier
	// attempt of this call).
	StatusDuplicate IngestStatus = "duplicate"
	// StatusConflict: a different outcome holds the reservation id; not
	// written. Only in a list: one outcome alone is a TypeConflict problem.
	StatusConflict IngestStatus = "conflict"
	// StatusNoEndpoint: no endpoint of the namespace takes the outcome's
	// kind; not written. Only in a list, as StatusConflict.
	StatusNoEndpoint IngestStatus = "no_endpoint"
)

// IngestResult is relay's answer for one outcome.
type IngestResult struct {
	ReservationID string       `json:"reservation_id"`
	Status        IngestStatus `json:"status"`
	// Type and Detail explain a conflict or no_endpoint.
	Type   string `json:"type,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// Scheme is how an endpoint's deliveries are signed.
type Scheme string

// The signing schemes.
const (
	SchemeMkitHookV2       Scheme = "mkit-hook-v2"
	SchemeStandardWebhooks Scheme = "standard-webhooks"
	// SchemeStandardWebhooksV1a signs with Ed25519 under the endpoint's own
	// key pair, which relay generates; verify with Endpoint.PublicKey.
	SchemeStandardWebhooksV1a Scheme = "standard-webhooks-v1a"
)

// EndpointConfig registers or replaces an endpoint. What is left out takes
// its default: scheme mkit-hook-v2, every kind, enabled, max_in_flight 1.
type EndpointConfig struct {
	// URL is an absolute https URL (http only to a loopback relay allows).
	URL    string `json:"url"`
	Scheme Scheme `json:"scheme,omitempty"`
	// Kinds are the kinds the endpoint takes; empty takes every kind.
	Kinds []Kind `json:"kinds,omitempty"`
	// Enabled nil is true.
	Enabled *bool `json:"enabled,omitempty"`
	// MaxInFlight is how many calls a delivery keeps open, 1 to 16; 0 is
	// left out (1, strict order).
	MaxInFlight int `json:"max_in_flight,omitempty"`
	// Secret is a Standard Webhooks whsec_ secret to sign with; empty keeps
	// the current one, or relay generates one.
	Secret string `json:"secret,omitempty"`
	// RotateKey, for standard-webhooks-v1a, has relay generate a new key
	// pair; the previous one keeps signing beside it until the next
	// rotation. Keys cannot be given.
	RotateKey bool `json:"rotate_key,omitempty"`
	// TimeoutMs bounds each call to the endpoint, 1000 to 10000 ms; 0 is
	// left out (5000).
	TimeoutMs int `json:"timeout_ms,omitempty"`
	// Headers are sent with every attempt: up to 10 lower-case names (not
	// one relay sets, nor a signature or connection header) to 1 to 1024
	// bytes of printable ASCII. A put replaces them all. Values of names
	// holding authorization, cookie, auth, token, secret, key, pass,
	// session, credential or signature are never shown again.
	Headers map[string]string `json:"headers,omitempty"`
	// KeepHeaders names headers the endpoint holds whose stored values are
	// kept as they are: what a caller that read them as HeaderRedacted
	// sends instead of the placeholder, which relay refuses. A name the
	// endpoint lacks, or that Headers also sets, is TypeInvalidEndpoint.
	KeepHeaders []string `json:"keep_headers,omitempty"`
	// RateLimit is the most calls per second the whole relay cluster makes
	// to the endpoint, 1 to 10000; 0 is left out (unlimited).
	RateLimit int `json:"rate_limit,omitempty"`
}

// Backlog is what is pending delivery on a stream.
type Backlog struct {
	Rows  uint64 `json:"rows"`
	Bytes uint64 `json:"bytes"`
}

// Endpoint is an endpoint as relay shows it, with its stream's backlog and
// next attempt. It never holds a secret.
type Endpoint struct {
	ID          string `json:"id"`
	URL         string `json:"url"`
	Scheme      Scheme `json:"scheme"`
	Kinds       []Kind `json:"kinds"`
	Enabled     bool   `json:"enabled"`
	MaxInFlight int    `json:"max_in_flight"`
	// DisabledReason says why relay disabled it: "gone" after a 410,
	// "failing" after its disable-after period of failed calls.
	DisabledReason string    `json:"disabled_reason,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
	Backlog        Backlog   `json:"backlog"`
	// NextAttemptAt is when the stream is next delivered; nil when nothing
	// is scheduled.
	NextAttemptAt *time.Time `json:"next_attempt_at"`
	// OldestPendingAt is when the oldest pending row was accepted; nil when
	// none is pending. A row older than the idempotency window shows as
	// accepted a window ago.
	OldestPendingAt *time.Time `json:"oldest_pending_at"`
	// Counters say what became of the endpoint's outcomes since it was
	// created: each accepted one is delivered, pending or dropped.
	Counters EndpointCounters `json:"counters"`
	// TimeoutMs is the endpoint's call timeout, 5000 when it set none.
	TimeoutMs int `json:"timeout_ms"`
	// Headers are the endpoint's headers, a write-only one's value shown as
	// HeaderRedacted.
	Headers map[string]string `json:"headers"`
	// PublicKey is a standard-webhooks-v1a endpoint's current whpk_ public
	// key, to verify its deliveries with (hookverify.StandardVerifier's
	// PublicKeys); empty for other schemes. The private key never leaves
	// relay.
	PublicKey string `json:"public_key,omitempty"`
	// RateLimit is the endpoint's calls per second; 0 when unlimited.
	RateLimit int `json:"rate_limit,omitempty"`
	// Throttle is set while relay delivers below the endpoint's configured
	// limits because it refused calls (429, 502, 503, 504 or a timeout);
	// nil when it delivers at them.
	Throttle *Throttle `json:"throttle,omitempty"`
	// DisabledAt is when the endpoint was disabled, by relay or an
	// operator; nil while enabled.
	DisabledAt *time.Time `json:"disabled_at,omitempty"`
	// Failing is set while the endpoint's calls fail; relay disables it
	// once that has lasted its disable-after period.
	Failing *Failing `json:"failing,omitempty"`
	// PerMinute is the stream's last 60 minutes, oldest first, the
	// current one last: what it delivered and which calls failed in each.
	// Only Client.Endpoint fills it; a list and a PutEndpoint answer leave
	// it nil.
	PerMinute []EndpointMinute `json:"per_minute,omitempty"`
}

// Failing is since when an endpoint's calls fail and how the last one did.
type Failing struct {
	Since      time.Time `json:"since"`
	LastStatus int       `json:"last_status,omitempty"`
	LastError  string    `json:"last_error,omitempty"`
}

// EndpointMinute is one minute of a stream, counted by every relay process
// sharing the store. A resent outcome counts again when it is delivered
// again.
type EndpointMinute struct {
	// Start is when the minute began.
	Start          time.Time `json:"start"`
	Delivered      uint64    `json:"delivered"`
	FailedAttempts uint64    `json:"failed_attempts"`
}

// Throttle is a stream's effective limits after its endpoint refused
// calls, and why. Relay halves them at each refusal and raises them again
// as calls succeed, back to the configuration.
type Throttle struct {
	// MaxInFlight is the calls kept open at once now.
	MaxInFlight int `json:"max_in_flight"`
	// RateLimit is the calls per second now; 0 for an endpoint without
	// one.
	RateLimit float64 `json:"rate_limit,omitempty"`
	// Reason is what last lowered them: the status answered ("429") or
	// "timeout".
	Reason string `json:"reason"`
	// Since is when the throttle began.
	Since time.Time `json:"since"`
}

// EndpointCounters count an endpoint's outcomes delivered, its failed calls
// and its outcomes dropped by a forced delete.
type EndpointCounters struct {
	Delivered      uint64 `json:"delivered"`
	FailedAttempts uint64 `json:"failed_attempts"`
	Dropped        uint64 `json:"dropped"`
}

// HeaderRedacted stands for a write-only header's value in an Endpoint.
const HeaderRedacted = "[redacted]"

// SavedEndpoint is the answer to PutEndpoint.
type SavedEndpoint struct {
	Endpoint
	// Secret is the secret relay generated, shown this once; empty
	// otherwise.
	Secret string `json:"secret,omitempty"`
	// Created is true when the endpoint is new (201), false when replaced.
	Created bool `json:"-"`
}

// DeletedEndpoint is the answer to DeleteEndpoint.
type DeletedEndpoint struct {
	ID string `json:"id"`
	// DroppedRows counts the pending rows dropped with it (0 unless
	// forced).
	DroppedRows uint64 `json:"dropped_rows"`
}

// StreamState is what a stream's delivery timer is doing.
type StreamState string

// The stream states; api/openapi.yaml's StreamState says what each means.
const (
	StateIdle       StreamState = "idle"
	StateDue        StreamState = "due"
	StateBackingOff StreamState = "backing_off"
	StateDelivering StreamState = "delivering"
	StateParked     StreamState = "parked"
	StateCorrupt    StreamState = "corrupt"
	StateNone       StreamState = "none"
)

// OutboxPage is one page of an endpoint's stream.
type OutboxPage struct {
	Endpoint      string      `json:"endpoint"`
	Backlog       Backlog     `json:"backlog"`
	State         StreamState `json:"state"`
	NextAttemptAt *time.Time  `json:"next_attempt_at"`
	// FailedFires counts the deliveries in a row that delivered nothing.
	FailedFires uint32      `json:"failed_fires"`
	Rows        []OutboxRow `json:"rows"`
	// NextCursor is the next page's cursor; nil on the last page.
	NextCursor *string `json:"next_cursor"`
}

// OutboxRow is one pending row. A row that does not decode has Corrupt set,
// and Kind and OccurredUnixMs empty when they cannot be read.
type OutboxRow struct {
	ReservationID  string `json:"reservation_id"`
	Sequence       uint64 `json:"sequence"`
	Kind           Kind   `json:"kind,omitempty"`
	OccurredUnixMs int64  `json:"occurred_unix_ms,omitempty"`
	// LastAttempt is the last failed attempt; nil when none failed yet.
	LastAttempt *Attempt `json:"last_attempt"`
	// Attempts are the row's last attempts, at most 10, oldest first.
	Attempts []AttemptRecord `json:"attempts"`
	// AttemptCount is every attempt so far, those no longer in Attempts
	// included.
	AttemptCount uint32 `json:"attempt_count"`
	Corrupt      bool   `json:"corrupt,omitempty"`
}

// AttemptRecord is one recorded delivery attempt of a row.
type AttemptRecord struct {
	At         time.Time `json:"at"`
	DurationMs uint32    `json:"duration_ms"`
	// Status is the endpoint's HTTP status; 0 when it did not answer.
	Status int `json:"status,omitempty"`
	// Error is why the attempt failed (status, timeout, connect, ...);
	// empty for an attempt that delivered.
	Error string `json:"error,omitempty"`
	// ResponseExcerpt is the start of a refusal's body, made printable by
	// relay: at most 256 bytes. It is the endpoint's text: show it as
	// text, never as markup.
	ResponseExcerpt string `json:"response_excerpt,omitempty"`
}

// Attempt is a row's last failed delivery attempt.
type Attempt struct {
	At time.Time `json:"at"`
	// Status is the endpoint's HTTP status; 0 when it did not answer.
	Status int `json:"status,omitempty"`
	// Error is the failure class, e.g. status, connect, gone.
	Error string `json:"error"`
	// Count is the failed attempts so far.
	Count uint32 `json:"count"`
}

// ReplayResult is the answer to Replay: the row is first in its stream,
// due at NextAttemptAt.
type ReplayResult struct {
	Endpoint      string    `json:"endpoint"`
	ReservationID string    `json:"reservation_id"`
	Sequence      uint64    `json:"sequence"`
	NextAttemptAt time.Time `json:"next_attempt_at"`
}
