package app

import (
	"log/slog"
	"time"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/delivery"
	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/redisstore"
)

// Config is one relay process. Defaults gives every field its default.
type Config struct {
	// RedisURL is a Redis URL, comma-separated Cluster seeds, or a Cluster
	// URL with addr= seeds; empty starts an embedded miniredis, which is
	// development mode.
	RedisURL string
	// Listen is the API's address; in development it makes the default
	// public URL.
	Listen  string
	Prefix  string
	Buckets int
	// Durability is when an ingest is answered 202: "memory" (the
	// default) once the master ran it, "replicas=N" once N replicas also
	// acknowledged it (WAIT) within DurabilityTimeout.
	Durability        string
	DurabilityTimeout time.Duration
	// MaxConnections bounds the API connections open at once.
	MaxConnections int
	// MaxNamespaces bounds the namespaces relay holds: the first endpoint
	// of one more is refused.
	MaxNamespaces int
	// MaxEndpoints bounds the endpoints a namespace is given:
	// outbox.DefaultMaxEndpoints when zero, at most outbox.HardMaxEndpoints
	// (one outcome's ingest writes to every endpoint in one batch).
	MaxEndpoints int
	// BacklogEvery is how often the backlog gauges are sampled; 0 never.
	BacklogEvery time.Duration
	// Retention keeps each delivered outcome's history (its log row and
	// attempts) this long after its last endpoint is done with it; 0
	// deletes it at acknowledgement.
	Retention time.Duration
	Signing   Signing
	Delivery  Delivery
	Auth      Auth
	// LogLevel is the lowest level logged, as ParseLogLevel reads it; the
	// command applies it to Logger.
	LogLevel string
	// Logger is relay's log; nil is slog.Default().
	Logger *slog.Logger
	// Clock is the one clock of the process: the outbox, the delivery
	// driver and its handler read it. Nil is the wall clock made never to
	// go backward, so that a clock stepped back does not stall rows dated
	// by it.
	Clock clock.Clock
}

// Signing is the mkit-hook v2 signing key and the other public keys
// published beside it.
type Signing struct {
	// KeyFile is a PEM Ed25519 private key; empty signs with a throwaway
	// key, in development only.
	KeyFile string
	KeyID   string
	// PublishedKeys is a JSON key list file of other public keys to
	// publish beside the signing key.
	PublishedKeys string
}

// Delivery is what the delivery driver and its channel are built from.
type Delivery struct {
	// PublicURL is relay's canonical origin, every webhook's audience;
	// required with a real Redis.
	PublicURL string
	// AllowCIDRs is the comma-separated CIDRs webhooks may reach despite
	// the SSRF guard.
	AllowCIDRs  string
	Concurrency int
	// SlowConcurrency is the slow lane's size; zero is the default.
	SlowConcurrency int
	// FullPollEvery is how often the driver reads every due index; zero is
	// the default.
	FullPollEvery time.Duration
	// DisableAfter disables an endpoint that has delivered nothing this
	// long while its calls failed; 0 never does.
	DisableAfter time.Duration
	// Linger is how long a fire that delivered its stream's every row
	// waits for the next outcome ingested here (delivery.Handler.Linger);
	// 0 never waits.
	Linger time.Duration
}

// Auth is how relay verifies the bearer tokens of its API.
type Auth struct {
	// Secret is the HS256 secret tokens are signed with.
	Secret string
	// SecretOnCommandLine says Secret was given as a flag, where the
	// process list shows it; relay warns.
	SecretOnCommandLine bool
	// PublicKeys is the comma-separated Ed25519 public key files, each
	// entry path or kid=path.
	PublicKeys string
	Issuer     string
	// Audience is the aud every token must contain; empty is the public
	// URL.
	Audience string
	Leeway   time.Duration
}

// DefaultLeeway is the clock skew tolerated on token times by default.
const DefaultLeeway = 5 * time.Second

// DevTokenTTL is how long the development admin token minted at start
// lasts.
const DevTokenTTL = 24 * time.Hour

// Defaults is the configuration of a development relay: every setting at
// its default, on an embedded miniredis.
func Defaults() Config {
	return Config{
		Listen:            "127.0.0.1:8080",
		Prefix:            redisstore.DefaultPrefix,
		Buckets:           redisstore.DefaultBuckets,
		Durability:        DurabilityMemory,
		DurabilityTimeout: redisstore.DefaultDurabilityTimeout,
		MaxConnections:    httpapi.DefaultMaxConnections,
		MaxNamespaces:     outbox.DefaultMaxNamespaces,
		BacklogEvery:      delivery.DefaultBacklogEvery,
		Retention:         outbox.DefaultRetention,
		Signing:           Signing{KeyID: "relay-1"},
		Delivery:          Delivery{Concurrency: delivery.DefaultConcurrency, SlowConcurrency: delivery.DefaultSlowConcurrency, FullPollEvery: delivery.DefaultPollInterval, DisableAfter: delivery.DefaultDisableAfter, Linger: delivery.DefaultLinger},
		Auth:              Auth{Leeway: DefaultLeeway},
	}
}
