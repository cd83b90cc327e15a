package redistest

import (
	"strings"
	"unicode"
)

// Fragments are the pieces of a secret, a Redis password, that an attacker
// reading relay's output could learn from: every substring of 3 bytes or
// more, but those of only digits and punctuation, which timestamps and
// addresses hold anyway; a secret of only those is looked for whole.
func Fragments(secret string) []string {
	var out []string
	for i := range secret {
		for j := i + 3; j <= len(secret); j++ {
			if strings.IndexFunc(secret[i:j], unicode.IsLetter) >= 0 {
				out = append(out, secret[i:j])
			}
		}
	}
	if len(out) == 0 {
		out = append(out, secret)
	}
	return out
}
