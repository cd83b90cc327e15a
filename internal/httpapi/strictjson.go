package httpapi

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// The strict check is a single pass over the body that builds no values: it
// runs before decodeStrict on every request, so it must cost little more than
// reading the bytes once.
//
// Its verdicts for request bodies are those of the encoding/json Token walk
// it replaced, input for input, with that walk also checking the raw bytes
// of each string value for the last rule (FuzzCheckStrict holds it to
// that):
//
//   - Grammar is RFC 8259: one value, then only space, tab, CR or LF.
//   - A value may sit inside at most maxJSONDepth containers, so an empty
//     array at depth 16 passes and anything inside it does not.
//   - Keys are compared as encoding/json decodes them, so {"a":1,"\u0061":2}
//     holds a duplicate.
//   - null is refused wherever it appears: no member of a request is
//     nullable, and encoding/json would take null as "absent".
//   - Keys must hold no ASCII upper-case letter and no byte of 0x80 or
//     above once decoded: encoding/json matches keys to fields without
//     regard to case (and folds K, U+212A, to k), so "ID" and "id" would be
//     one field, the last one winning; every field name of the API is
//     lower-case ASCII.
//   - String values must be valid UTF-8 (no stray, overlong or surrogate
//     bytes, so no CESU-8) and hold no unpaired surrogate escape (\ud800 is
//     valid JSON but no character). encoding/json would turn each into
//     U+FFFD, so different bodies would become one value; the problem names
//     the value's path (outcomes[2].repository). Keys holding either are
//     refused by the key rule above (once decoded they hold U+FFFD), and
//     are compared after the same replacement.
//
// A token's claims are checked under jsonRules that let keys be any valid
// UTF-8 and let null stand, its header under rules that let keys be any
// valid UTF-8: their issuer names the members relay ignores.

const (
	detailNotJSON  = "the body is not valid JSON"
	detailTooDeep  = "the body is nested too deeply"
	detailTrailing = "the body must hold exactly one JSON value, with nothing after it"
	detailNull     = "null is not allowed; leave the member out"
	// detailBadString follows the path of the string value.
	detailBadString = " must be valid UTF-8 with no unpaired surrogate escape"
)

// jsonRules are what the strict check asks beyond RFC 8259 and unique keys.
// The zero value is the rules of request bodies.
type jsonRules struct {
	// openKeys lets keys be any valid UTF-8 rather than lower-case ASCII:
	// a token may carry claims and header parameters relay ignores, named
	// as their issuer likes.
	openKeys bool
	// nullOK lets null stand anywhere.
	nullOK bool
}

// badString is what a value holding an invalid string returns while the
// scan unwinds and collects its path; checkStrictTop replaces it with the
// problem naming that path.
var badString = &Problem{}

// smallObject is how many keys an object holds before its duplicate check
// moves from a linear scan to a map: a linear scan of a few short keys is
// cheaper than hashing them, but quadratic in a hostile object of thousands.
const smallObject = 16

// checkStrict refuses a body that is not exactly one JSON value, holds a
// duplicate key at any depth, or nests too deeply. encoding/json alone keeps
// the last of duplicate keys, which would let two readers of one request
// disagree.
func checkStrict(body []byte) *Problem {
	_, p := checkStrictTop(body)
	return p
}

// checkStrictTop is checkStrict that also counts the keys of the body's
// top-level object.
func checkStrictTop(body []byte) (topKeys int, p *Problem) {
	return checkStrictRules(body, jsonRules{})
}

// checkStrictRules is checkStrictTop under rules.
func checkStrictRules(body []byte, rules jsonRules) (topKeys int, p *Problem) {
	// Room for the keys of every object open at once: a valid list of
	// outcomes has at most a dozen, so this is its only allocation.
	s := strictScanner{data: body, keys: make([][]byte, 0, 32), rules: rules}
	if p := s.value(0); p != nil {
		if p == badString {
			return 0, NewProblem(SlugInvalidRequest, valuePath(s.path)+detailBadString)
		}
		return 0, p
	}
	s.skipSpace()
	if s.pos != len(s.data) {
		return 0, NewProblem(SlugInvalidRequest, detailTrailing)
	}
	return s.top, nil
}

// valuePath names a value by the path collected while unwinding to it,
// innermost segment first: "outcomes[2].repository", "the body" for the
// body itself.
func valuePath(rev []string) string {
	var b strings.Builder
	if len(rev) == 0 || strings.HasPrefix(rev[len(rev)-1], "[") {
		b.WriteString("the body")
	}
	for i := len(rev) - 1; i >= 0; i-- {
		if b.Len() > 0 && !strings.HasPrefix(rev[i], "[") {
			b.WriteByte('.')
		}
		b.WriteString(rev[i])
	}
	return b.String()
}

// keySegment is a key as a path names it: as it is when it is a plain
// name, quoted otherwise.
func keySegment(key []byte) string {
	if len(key) == 0 {
		return `""`
	}
	for _, c := range key {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_') {
			return strconv.Quote(truncate(string(key)))
		}
	}
	return truncate(string(key))
}

// strictScanner walks data once. Objects being scanned share one stack of
// keys, innermost object last, rather than a map each.
type strictScanner struct {
	data []byte
	pos  int
	// keys holds the keys seen so far by every open object, each object
	// owning a suffix. A key is the raw bytes between its quotes when those
	// are already its decoded form, else a slice of decoded.
	keys [][]byte
	// decoded holds the decoded form of keys with escapes or invalid UTF-8,
	// stacked like keys.
	decoded []byte
	// top counts the keys of the top-level object.
	top   int
	rules jsonRules
	// path collects, innermost first, where an invalid string value is.
	path []string
}

func notJSON() *Problem { return NewProblem(SlugInvalidRequest, detailNotJSON) }

func tooDeep() *Problem { return NewProblem(SlugInvalidRequest, detailTooDeep) }

func (s *strictScanner) skipSpace() { s.pos = skipJSONSpace(s.data, s.pos) }

// skipJSONSpace is the index of the first byte of data at or after pos
// that is not JSON whitespace, len(data) when none is.
func skipJSONSpace(data []byte, pos int) int {
	for pos < len(data) {
		switch data[pos] {
		case ' ', '\t', '\n', '\r':
			pos++
		default:
			return pos
		}
	}
	return pos
}

// peek returns the next byte after space, or ok false at the end.
func (s *strictScanner) peek() (c byte, ok bool) {
	s.skipSpace()
	if s.pos == len(s.data) {
		return 0, false
	}
	return s.data[s.pos], true
}

// value scans one value inside depth containers.
func (s *strictScanner) value(depth int) *Problem {
	c, ok := s.peek()
	if !ok {
		return notJSON()
	}
	switch c {
	case '{':
		return s.object(depth)
	case '[':
		return s.array(depth)
	case '"':
		_, _, valid, ok := s.str()
		switch {
		case !ok:
			return notJSON()
		case !valid:
			return badString
		}
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		if p := s.literal("null"); p != nil || s.rules.nullOK {
			return p
		}
		return NewProblem(SlugInvalidRequest, detailNull)
	default:
		if !s.number() {
			return notJSON()
		}
	}
	return nil
}

// array scans an array inside depth containers; s.pos is at its '['.
func (s *strictScanner) array(depth int) *Problem {
	s.pos++
	c, ok := s.peek()
	switch {
	case ok && c == ']':
		s.pos++
		return nil
	case !ok || c == '}':
		return notJSON()
	case depth >= maxJSONDepth:
		// The Token walk refused depth as soon as it saw that an element
		// follows, before reading it; refusing here keeps its answer for
		// bodies that are both too deep and malformed.
		return tooDeep()
	}
	for i := 0; ; i++ {
		if p := s.value(depth + 1); p != nil {
			if p == badString {
				s.path = append(s.path, "["+strconv.Itoa(i)+"]")
			}
			return p
		}
		c, ok := s.peek()
		switch {
		case ok && c == ',':
			s.pos++
		case ok && c == ']':
			s.pos++
			return nil
		default:
			return notJSON()
		}
	}
}

// object scans an object inside depth containers; s.pos is at its '{'.
func (s *strictScanner) object(depth int) *Problem {
	s.pos++
	if c, ok := s.peek(); ok && c == '}' {
		s.pos++
		return nil
	}
	o := objectKeys{first: len(s.keys), firstDecoded: len(s.decoded)}
	for {
		if c, ok := s.peek(); !ok || c != '"' {
			return notJSON()
		}
		key, valid, ok := s.key()
		switch {
		case !ok:
			return notJSON()
		case s.rules.openKeys && !valid:
			return NewProblem(SlugInvalidRequest, fmt.Sprintf("key %q%s", truncate(string(key)), detailBadString))
		case !s.rules.openKeys && !lowerASCII(key):
			return NewProblem(SlugInvalidRequest, fmt.Sprintf("key %q must be lower-case ASCII", truncate(string(key))))
		}
		if s.add(&o, key) {
			return NewProblem(SlugInvalidRequest, fmt.Sprintf("duplicate key %q", truncate(string(key))))
		}
		if depth == 0 {
			s.top++
		}
		if depth >= maxJSONDepth {
			// As in array: the Token walk refused depth right after the
			// first key, before its colon.
			return tooDeep()
		}
		if c, ok := s.peek(); !ok || c != ':' {
			return notJSON()
		}
		s.pos++
		if p := s.value(depth + 1); p != nil {
			if p == badString {
				s.path = append(s.path, keySegment(key))
			}
			return p
		}
		c, ok := s.peek()
		switch {
		case ok && c == ',':
			s.pos++
		case ok && c == '}':
			s.pos++
			s.keys, s.decoded = s.keys[:o.first], s.decoded[:o.firstDecoded]
			return nil
		default:
			return notJSON()
		}
	}
}

// lowerASCII reports whether a decoded key has no upper-case ASCII letter
// and no byte of 0x80 or above, so that encoding/json's case-insensitive
// match can only match it to the field of exactly that name.
func lowerASCII(key []byte) bool {
	for _, c := range key {
		if c >= utf8.RuneSelf || 'A' <= c && c <= 'Z' {
			return false
		}
	}
	return true
}

// objectKeys is the duplicate check of one object being scanned.
type objectKeys struct {
	// While the object is small its keys are s.keys[first:], decoded ones
	// in s.decoded[firstDecoded:]; objects nested in it use the stacks above
	// and truncate them back when they close.
	first, firstDecoded int
	// big holds the object's keys once it outgrows smallObject.
	big map[string]struct{}
}

// add records key as a key of o, or reports that o already has it.
func (s *strictScanner) add(o *objectKeys, key []byte) (dup bool) {
	if o.big == nil {
		own := s.keys[o.first:]
		for _, k := range own {
			if bytes.Equal(k, key) {
				return true
			}
		}
		if len(own) < smallObject {
			s.keys = append(s.keys, key)
			return false
		}
		o.big = make(map[string]struct{}, 2*smallObject)
		for _, k := range own {
			o.big[string(k)] = struct{}{}
		}
	} else if _, seen := o.big[string(key)]; seen {
		return true
	}
	o.big[string(key)] = struct{}{}
	// The map holds copies: drop the stacked forms, so that an object of
	// many escaped keys does not grow s.decoded.
	s.keys, s.decoded = s.keys[:o.first], s.decoded[:o.firstDecoded]
	return false
}

// key scans an object key at s.pos and returns it as encoding/json would
// decode it; valid is str's. A key without escapes and with valid UTF-8 is
// its own decoded form and is returned without copying.
func (s *strictScanner) key() (key []byte, valid, ok bool) {
	raw, escaped, valid, ok := s.str()
	if !ok {
		return nil, false, false
	}
	if !escaped && valid {
		return raw, true, true
	}
	start := len(s.decoded)
	s.decoded = appendUnquoted(s.decoded, raw)
	return s.decoded[start:], valid, true
}

// str scans a string at s.pos, the opening quote, and leaves s.pos after
// the closing one. raw is what lies between the quotes; escaped reports a
// backslash in it; valid reports valid UTF-8 with every surrogate escape in
// a pair. An invalid string is still scanned to its end, so that a syntax
// error after it is seen as one.
func (s *strictScanner) str() (raw []byte, escaped, valid, ok bool) {
	start := s.pos + 1
	valid = true
	for i := start; i < len(s.data); i++ {
		switch c := s.data[i]; {
		case c == '"':
			s.pos = i + 1
			return s.data[start:i], escaped, valid, true
		case c == '\\':
			n := escapeLen(s.data[i:])
			if n == 0 {
				return nil, false, false, false
			}
			escaped = true
			if n == 6 {
				if r := hex4(s.data[i+2:]); utf16.IsSurrogate(r) {
					// A high surrogate pairs with the low one escaped right
					// after it, and both are consumed; anything else is
					// unpaired.
					next := s.data[i+6:]
					if r < 0xdc00 && escapeLen(next) == 6 && isLowSurrogate(hex4(next[2:])) {
						n += 6
					} else {
						valid = false
					}
				}
			}
			i += n - 1
		case c < 0x20:
			return nil, false, false, false
		case c >= utf8.RuneSelf:
			// DecodeRune refuses stray bytes, overlong forms and encoded
			// surrogates alike, answering (RuneError, 1); a real U+FFFD is
			// three bytes.
			r, n := utf8.DecodeRune(s.data[i:])
			if r == utf8.RuneError && n == 1 {
				valid = false
			}
			i += n - 1
		}
	}
	return nil, false, false, false
}

func isLowSurrogate(r rune) bool { return 0xdc00 <= r && r <= 0xdfff }

// escapeLen returns the length of the escape sequence that b starts with, 0
// if it is not one JSON allows.
func escapeLen(b []byte) int {
	if len(b) < 2 || b[0] != '\\' {
		return 0
	}
	switch b[1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2
	case 'u':
		if hex4(b[2:]) >= 0 {
			return 6
		}
	}
	return 0
}

// hex4 decodes four hex digits at the start of b, or returns -1.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// appendUnquoted appends the decoded form of raw, the inside of a string
// that str accepted, following encoding/json's unquote: a surrogate pair of escapes
// is one rune, a lone surrogate escape is U+FFFD, and so is each byte of
// invalid UTF-8.
func appendUnquoted(dst, raw []byte) []byte {
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\' && raw[i+1] == 'u':
			r := hex4(raw[i+2:])
			i += 6
			if utf16.IsSurrogate(r) {
				lo := rune(-1)
				if i+1 < len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
					lo = hex4(raw[i+2:])
				}
				if pair := utf16.DecodeRune(r, lo); pair != unicode.ReplacementChar {
					dst = utf8.AppendRune(dst, pair)
					i += 6
					continue
				}
				r = unicode.ReplacementChar
			}
			dst = utf8.AppendRune(dst, r)
		case c == '\\':
			dst = append(dst, unescape(raw[i+1]))
			i += 2
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, n := utf8.DecodeRune(raw[i:])
			dst = utf8.AppendRune(dst, r)
			i += n
		}
	}
	return dst
}

// unescape returns the byte a one-letter escape stands for.
func unescape(c byte) byte {
	switch c {
	case 'b':
		return '\b'
	case 'f':
		return '\f'
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	}
	return c // '"', '\\' or '/'
}

// literal scans true, false or null at s.pos.
func (s *strictScanner) literal(word string) *Problem {
	if len(s.data)-s.pos < len(word) || string(s.data[s.pos:s.pos+len(word)]) != word {
		return notJSON()
	}
	s.pos += len(word)
	return nil
}

// number scans a number at s.pos with RFC 8259's grammar:
// -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
// It stops at the first byte that cannot continue the number, as
// encoding/json does, so "01" is the number 0 followed by 1.
func (s *strictScanner) number() bool {
	d, i := s.data, s.pos
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		i = skipDigits(d, i+1)
	default:
		return false
	}
	if i < len(d) && d[i] == '.' {
		j := skipDigits(d, i+1)
		if j == i+1 {
			return false
		}
		i = j
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		j := skipDigits(d, i)
		if j == i {
			return false
		}
		i = j
	}
	s.pos = i
	return true
}

func skipDigits(d []byte, i int) int {
	for i < len(d) && '0' <= d[i] && d[i] <= '9' {
		i++
	}
	return i
}
