package hookverify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"time"
)

// ErrKeyListSource marks a key list URL FetchKeyList refuses to trust.
var ErrKeyListSource = errors.New("hookverify: untrusted key list URL")

// DefaultFetchTimeout bounds one FetchKeyList, connection to last byte.
const DefaultFetchTimeout = 10 * time.Second

// FetchOption configures FetchKeyList.
type FetchOption func(*fetcher)

// WithFetchTimeout bounds each fetch (DefaultFetchTimeout when d ≤ 0); the
// context's deadline, when earlier, holds too.
func WithFetchTimeout(d time.Duration) FetchOption {
	return func(f *fetcher) {
		if d > 0 {
			f.timeout = d
		}
	}
}

// WithTransport fetches through rt, for a private CA's roots or a test
// server's. Redirects are still refused; taking a proxy is then rt's
// choice (the default transport takes none from the environment).
func WithTransport(rt http.RoundTripper) FetchOption {
	return func(f *fetcher) {
		if rt != nil {
			f.client = noRedirects(rt)
		}
	}
}

type fetcher struct {
	client  *http.Client
	timeout time.Duration
}

// keyListClient fetches the trust anchor: no proxy from the environment and
// no redirects, so what answers is the host named.
var keyListClient = noRedirects(&http.Transport{Proxy: nil})

func noRedirects(rt http.RoundTripper) *http.Client {
	return &http.Client{
		Transport:     rt,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// FetchKeyList fetches relay's key list from rawURL (relay serves it at
// /.well-known/mkit-hook-keys.json) and parses it with ParseKeyList. The
// list is the receiver's trust anchor, so the fetch is strict:
//
//   - the URL must pass CheckKeyListURL: https, or plain http to a loopback
//     relay only;
//   - no redirect is followed (a 3xx is an error) and no proxy is taken from
//     the environment, so what answers is the host named;
//   - only a 200 is read, at most the 1 MiB ParseKeyList accepts, within
//     DefaultFetchTimeout (see WithFetchTimeout).
//
// A list that breaks ParseKeyList's rules is refused with an error matching
// ErrKeyList; a refused URL's matches ErrKeyListSource.
func FetchKeyList(ctx context.Context, rawURL string, opts ...FetchOption) (KeyList, error) {
	u, err := keyListURL(rawURL)
	if err != nil {
		return KeyList{}, err
	}
	f := fetcher{client: keyListClient, timeout: DefaultFetchTimeout}
	for _, o := range opts {
		o(&f)
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return KeyList{}, fmt.Errorf("key list URL: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		return KeyList{}, fmt.Errorf("fetch key list: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return KeyList{}, fmt.Errorf("fetch key list: %s answered %d", shown(u), resp.StatusCode)
	}
	// One byte over the limit, so that ParseKeyList says the list is too
	// large rather than cut short.
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxKeyList+1))
	if err != nil {
		return KeyList{}, fmt.Errorf("fetch key list: %w", err)
	}
	list, err := ParseKeyList(data)
	if err != nil {
		return KeyList{}, fmt.Errorf("key list %s: %w", shown(u), err)
	}
	return list, nil
}

// CheckKeyListURL applies FetchKeyList's rule for where a key list may come
// from without fetching it, so a receiver can refuse to start on a bad
// setting: https, or plain http only from a loopback relay (localhost or a
// loopback address), where no one sits in between. Errors match
// ErrKeyListSource.
func CheckKeyListURL(rawURL string) error {
	_, err := keyListURL(rawURL)
	return err
}

func keyListURL(rawURL string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: not a URL", ErrKeyListSource) // the parse error would repeat the URL
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%w: %s: no host", ErrKeyListSource, shown(u))
	}
	switch u.Scheme {
	case "https":
		return u, nil
	case "http":
		host := u.Hostname()
		if ip, err := netip.ParseAddr(host); host == "localhost" || (err == nil && ip.IsLoopback()) {
			return u, nil
		}
	}
	return nil, fmt.Errorf("%w: %s: https required (plain http only from a loopback relay)", ErrKeyListSource, shown(u))
}

// shown is u for an error message: no password, query or fragment, which
// may carry a token.
func shown(u *url.URL) string {
	c := *u
	c.RawQuery, c.ForceQuery, c.Fragment, c.RawFragment = "", false, "", ""
	return c.Redacted()
}
