package hookverify

import (
	"context"
	"errors"
	"time"
)

// DefaultRefreshInterval is how often a KeyListRefresher fetches the list
// when its Interval is 0. relay publishes a new key at least 5 minutes
// before it signs with one (its key list is cacheable that long), so a
// receiver refreshing this often has the key before the first webhook
// signed with it arrives.
const DefaultRefreshInterval = 5 * time.Minute

// KeyListRefresher keeps an MkitVerifier's keys current with relay's
// published list, so a receiver follows relay's key rotations without a
// restart. A failed fetch, or a list FetchKeyList refuses, leaves the
// verifier's keys as they were: a receiver keeps verifying with the list it
// has while its relay is briefly unreachable.
type KeyListRefresher struct {
	// Verifier gets each list fetched, by SetKeys.
	Verifier *MkitVerifier
	// URL is the key list's, as FetchKeyList takes it.
	URL string
	// Options are passed to every FetchKeyList.
	Options []FetchOption
	// Interval is the time between fetches; DefaultRefreshInterval when 0.
	Interval time.Duration
	// OnError is called with each failed refresh, for logging or metrics;
	// the error carries no key material.
	OnError func(error)
	// Ticks, when set, replaces the ticker of Interval: Run refreshes on
	// each value received (a test, or a receiver with its own schedule,
	// drives it).
	Ticks <-chan time.Time
}

// Refresh fetches the list once and installs it in the verifier. On error
// the verifier keeps its keys.
func (r *KeyListRefresher) Refresh(ctx context.Context) error {
	if r.Verifier == nil {
		return errorf(ErrConfig, "key list refresher has no verifier")
	}
	list, err := FetchKeyList(ctx, r.URL, r.Options...)
	if err != nil {
		return err
	}
	r.Verifier.SetKeys(list)
	return nil
}

// Run refreshes on every tick until ctx ends, then returns ctx's error (or
// until Ticks is closed, then returns nil). It
// does not refresh at once: fetch the first list with FetchKeyList (or
// Refresh) before serving, so that a receiver that cannot get one fails at
// start. A URL CheckKeyListURL refuses, or a negative Interval, is returned
// at once.
func (r *KeyListRefresher) Run(ctx context.Context) error {
	if err := CheckKeyListURL(r.URL); err != nil {
		return err
	}
	ticks := r.Ticks
	if ticks == nil {
		d := r.Interval
		switch {
		case d < 0:
			return errorf(ErrConfig, "negative key list refresh interval")
		case d == 0:
			d = DefaultRefreshInterval
		}
		t := time.NewTicker(d)
		defer t.Stop()
		ticks = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case _, ok := <-ticks:
			if !ok {
				return nil
			}
		}
		if err := r.Refresh(ctx); err != nil && r.OnError != nil && !errors.Is(err, ctx.Err()) {
			r.OnError(err)
		}
	}
}
