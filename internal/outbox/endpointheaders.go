package outbox

import (
	"strings"

	"github.com/hookrelay/relay/internal/outbox/schema"
)

// secretHeaderWords mark a header whose value is a credential: its name is
// one of them or contains one. Such values are stored and sent but never
// shown.
var secretHeaderWords = []string{"authorization", "cookie", "auth", "token", "secret", "key", "pass", "session", "credential", "signature"}

// credentialSchemes start a value that is an Authorization credential,
// whatever the header's name (x-bearer: Bearer ...); matched with the
// space after them, in any case.
var credentialSchemes = []string{"bearer ", "basic ", "digest ", "negotiate ", "token "}

// credentialPrefixes start the tokens of well-known services: Stripe's
// keys, Standard Webhooks secrets, GitHub's and GitLab's tokens, Slack's,
// AWS access key ids, Google API keys, npm's, OpenAI's and Anthropic's.
var credentialPrefixes = []string{
	"sk_live_", "sk_test_", "rk_live_", "rk_test_", "whsec_",
	"ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-",
	"xoxa-", "xoxb-", "xoxp-", "xoxr-", "xoxs-",
	"AKIA", "ASIA", "AIza", "npm_", "sk-proj-", "sk-ant-",
}

// SecretHeader reports whether the header's value is write-only: its name
// holds authorization, cookie, auth, token, secret, key, pass, session,
// credential or signature (x-api-key, x-auth-token, x-client-secret), or
// its value looks like a credential (credentialValue).
func SecretHeader(name string, v schema.HeaderValue) bool {
	for _, w := range secretHeaderWords {
		if strings.Contains(name, w) {
			return true
		}
	}
	return credentialValue(string(v))
}

// credentialValue reports whether v looks like a credential, so that a
// secret under a harmless-looking name is not shown: it starts with an
// HTTP authentication scheme (Bearer, Basic, Digest, Negotiate, Token), or
// a word of it (a run of letters, digits and -._~+/) is JWT-shaped
// (starts eyJ), starts with a well-known token prefix (sk_live_, ghp_,
// xoxb-, AKIA, whsec_, ...), is 24 bytes or more mixing upper case, lower
// case and digits, or is 32 hex digits or more. It errs towards hiding: a
// value hidden needlessly is only not shown.
func credentialValue(v string) bool {
	for _, s := range credentialSchemes {
		if len(v) >= len(s) && strings.EqualFold(v[:len(s)], s) {
			return true
		}
	}
	for word := range strings.FieldsFuncSeq(v, func(r rune) bool { return !credentialWordRune(r) }) {
		if credentialWord(word) {
			return true
		}
	}
	return false
}

func credentialWordRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-._~+/", r)
}

func credentialWord(w string) bool {
	if strings.HasPrefix(w, "eyJ") {
		return true
	}
	for _, p := range credentialPrefixes {
		if strings.HasPrefix(w, p) {
			return true
		}
	}
	var upper, lower, digit bool
	hex := true
	for i := 0; i < len(w); i++ {
		c := w[i]
		upper = upper || c >= 'A' && c <= 'Z'
		lower = lower || c >= 'a' && c <= 'z'
		digit = digit || c >= '0' && c <= '9'
		hex = hex && (c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F')
	}
	return len(w) >= 24 && upper && lower && digit || len(w) >= 32 && hex
}
