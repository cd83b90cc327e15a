package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/hookrelay/relay/internal/outbox/schema"
)

// strictCases are bodies with the detail checkStrict answers them with, ""
// for accepted. They also seed FuzzCheckStrict.
var strictCases = []struct {
	name, body, detail string
}{
	{"empty object", `{}`, ""},
	{"empty array", `[]`, ""},
	{"scalars at the top", `"x"`, ""},
	{"true", `true`, ""},
	{"false", `false`, ""},
	{"null", `null`, detailNull},
	{"zero", `0`, ""},
	{"negative zero", `-0`, ""},
	{"full number", `-12.5e+3`, ""},
	{"capital exponent", `1E-7`, ""},
	{"huge number", `123456789012345678901234567890e999999`, ""},
	{"space around", " \t\r\n{\"a\" : [ 1 , 2 ] } \n", ""},
	{"same key at two depths", `{"a":{"a":1}}`, ""},
	{"same key in sibling objects", `[{"a":1},{"a":2}]`, ""},
	{"keys differing by case", `{"a":1,"A":2}`, `key "A" must be lower-case ASCII`},
	{"every escape", `"\"\\\/\b\f\n\r\t\u0041\uD834\uDD1E"`, ""},
	{"lone surrogate escape", `"\ud800"`, "the body" + detailBadString},
	{"lone low surrogate escape", `{"\udc00x":1}`, `key "�x" must be lower-case ASCII`},
	{"invalid UTF-8 in a value", "\"\xff\xfe\"", "the body" + detailBadString},
	{"surrogate pair in capitals", `"\uD834\uDD1E"`, ""},
	{"escaped U+FFFD", `"\ufffd"`, ""},
	{"raw U+FFFD", "\"\xef\xbf\xbd\"", ""},
	{"four-byte UTF-8", "\"\xf0\x9d\x84\x9e\"", ""},
	{"last code point", "\"\xf4\x8f\xbf\xbf\"", ""},
	{"escape after a pair", `"\ud834\udd1e\u0041"`, ""},
	{"lone low surrogate value", `"\udc00"`, "the body" + detailBadString},
	{"high surrogate then a letter escape", `"\ud800\u0041"`, "the body" + detailBadString},
	{"two high surrogates", `"\ud800\ud800"`, "the body" + detailBadString},
	{"surrogates reversed", `"\udc00\ud800"`, "the body" + detailBadString},
	{"high surrogate at the end", `"a\ud800"`, "the body" + detailBadString},
	{"high surrogate then the text of a low escape", `"\ud8000udC00"`, "the body" + detailBadString},
	{"high surrogate then a character", `"\ud800x"`, "the body" + detailBadString},
	{"high surrogate then an escaped backslash", `"\ud800\\udc00"`, "the body" + detailBadString},
	{"pair then a lone high", `"\ud834\udd1e\ud834"`, "the body" + detailBadString},
	{"raw 0xFF", "{\"repository\":\"acme\xff\"}", "repository" + detailBadString},
	{"overlong slash", "{\"repository\":\"\xc0\xaf\"}", "repository" + detailBadString},
	{"overlong three bytes", "\"\xe0\x80\xaf\"", "the body" + detailBadString},
	{"encoded surrogate", "\"\xed\xa0\x80\"", "the body" + detailBadString},
	{"CESU-8 pair", "{\"detail\":\"\xed\xa0\xbd\xed\xb2\xa9\"}", "detail" + detailBadString},
	{"beyond the last code point", "\"\xf4\x90\x80\x80\"", "the body" + detailBadString},
	{"truncated sequence", "\"\xe2\x82\"", "the body" + detailBadString},
	{"lone continuation byte", "\"\x80\"", "the body" + detailBadString},
	{"path through arrays and objects", "{\"outcomes\":[{\"a\":1},{\"committed\":{\"refs\":[{\"name\":\"ok\"},{\"name\":\"\\ud800\"}]}}]}", "outcomes[1].committed.refs[1].name" + detailBadString},
	{"path of an array at the top", "[\"ok\",[\"\xff\"]]", "the body[1][0]" + detailBadString},
	{"path with an empty key", "{\"\":\"\xff\"}", `""` + detailBadString},
	{"path with a key that is not a name", "{\"x\":{\"a.b\":\"\xff\"}}", `x."a.b"` + detailBadString},
	{"bad string wins over a later syntax error", "{\"a\":\"\xff\",}", "a" + detailBadString},
	{"bad string wins over a later duplicate", "{\"a\":\"\xff\",\"a\":1}", "a" + detailBadString},
	{"an earlier duplicate wins over a bad string", "{\"a\":1,\"a\":\"\xff\"}", `duplicate key "a"`},
	{"a bad key wins over its bad value", "{\"\xff\":\"\xff\"}", `key "�" must be lower-case ASCII`},
	{"syntax error inside a bad string", "\"\xff\x01\"", detailNotJSON},
	{"bad string at depth 16", strings.Repeat("[", 16) + "\"\xff\"" + strings.Repeat("]", 16), "the body" + strings.Repeat("[0]", 16) + detailBadString},
	{"invalid UTF-8 in a key", "{\"\xff\":1}", `key "�" must be lower-case ASCII`},
	{"DEL in a string", "\"\x7f\"", ""},
	{"value at depth 16", strings.Repeat("[", 16) + "1" + strings.Repeat("]", 16), ""},
	{"empty array at depth 16", strings.Repeat("[", 17) + strings.Repeat("]", 17), ""},
	{"empty object at depth 16", strings.Repeat(`{"a":`, 16) + "{}" + strings.Repeat("}", 16), ""},
	{"object value at depth 16", strings.Repeat(`{"a":`, 16) + "1" + strings.Repeat("}", 16), ""},
	{"many keys", manyKeys(40, ""), ""},
	{"a small object's keys do not reach its children", `{"a":1,"b":{"a":1,"b":2},"c":{"c":3}}`, ""},
	{"a big object's keys do not reach its children", strings.TrimSuffix(manyKeys(20, ""), "}") + `,"in":{"k0":1,"k19":2},"k20":{"in":1}}`, ""},

	{"empty body", ``, detailNotJSON},
	{"space only", " \n\t\r ", detailNotJSON},
	{"byte order mark", "\xef\xbb\xbf{}", detailNotJSON},
	{"single quotes", `{'a':1}`, detailNotJSON},
	{"bare word", `hello`, detailNotJSON},

	{"two values", `{} {}`, detailTrailing},
	{"trailing garbage", `{}x`, detailTrailing},
	{"two numbers", `1 2`, detailTrailing},
	{"trailing bracket", `[]]`, detailTrailing},
	{"trailing comma", `{},`, detailTrailing},
	{"two strings", `"a""b"`, detailTrailing},
	{"leading zero at the top", `01`, detailTrailing},
	{"negative leading zero at the top", `-01`, detailTrailing},
	{"hex at the top", `0x1`, detailTrailing},
	{"word after a literal", `truex`, detailTrailing},

	{"leading zero", `[01]`, detailNotJSON},
	{"hex", `[0x1]`, detailNotJSON},
	{"dot without fraction", `1.`, detailNotJSON},
	{"dot before exponent", `1.e5`, detailNotJSON},
	{"lone minus", `-`, detailNotJSON},
	{"minus then space", `- 1`, detailNotJSON},
	{"exponent without digits", `1e`, detailNotJSON},
	{"signed exponent without digits", `1e+`, detailNotJSON},
	{"leading dot", `.5`, detailNotJSON},
	{"leading plus", `+1`, detailNotJSON},
	{"NaN", `NaN`, detailNotJSON},
	{"Infinity", `-Infinity`, detailNotJSON},
	{"short literal", `tru`, detailNotJSON},
	{"capital literal", `True`, detailNotJSON},
	{"short null", `[nul]`, detailNotJSON},
	{"null in an array", `[1,null]`, detailNull},
	{"null member", `{"a":null}`, detailNull},
	{"upper-case key", `{"ID":1}`, `key "ID" must be lower-case ASCII`},
	{"Kelvin sign key", `{"\u212aind":1}`, "key \"\u212aind\" must be lower-case ASCII"},
	{"word after a literal in an array", `[truex]`, detailNotJSON},

	{"unknown escape", `"\x"`, detailNotJSON},
	{"single-quote escape", `"\'"`, detailNotJSON},
	{"short unicode escape", `"\u12"`, detailNotJSON},
	{"bad hex in escape", `"\u12G4"`, detailNotJSON},
	{"backslash at the end", `"\`, detailNotJSON},
	{"escaped closing quote", `"\"`, detailNotJSON},
	{"tab in a string", "\"a\tb\"", detailNotJSON},
	{"NUL in a string", "\"\x00\"", detailNotJSON},
	{"unit separator in a key", "{\"\x1f\":1}", detailNotJSON},
	{"newline in a string", "\"a\nb\"", detailNotJSON},

	{"unterminated string", `"abc`, detailNotJSON},
	{"unterminated object", `{"a":1`, detailNotJSON},
	{"unterminated array", `[1,2`, detailNotJSON},
	{"open brace", `{`, detailNotJSON},
	{"open bracket", `[`, detailNotJSON},
	{"key without value", `{"a"}`, detailNotJSON},
	{"key at the end", `{"a"`, detailNotJSON},
	{"colon without value", `{"a":}`, detailNotJSON},
	{"missing colon", `{"a" 1}`, detailNotJSON},
	{"semicolon for colon", `{"a";1}`, detailNotJSON},
	{"double colon", `{"a"::1}`, detailNotJSON},
	{"trailing comma in object", `{"a":1,}`, detailNotJSON},
	{"trailing comma in array", `[1,]`, detailNotJSON},
	{"leading comma", `[,1]`, detailNotJSON},
	{"double comma", `[1,,2]`, detailNotJSON},
	{"comma only", `{,}`, detailNotJSON},
	{"number key", `{1:2}`, detailNotJSON},
	{"missing comma in object", `{"a":1 "b":2}`, detailNotJSON},
	{"missing comma in array", `[1 2]`, detailNotJSON},
	{"mismatched close", `[1}`, detailNotJSON},
	{"mismatched empty close", `{]`, detailNotJSON},
	{"colon in array", `[1:2]`, detailNotJSON},

	{"value at depth 17", strings.Repeat("[", 17) + "1" + strings.Repeat("]", 17), detailTooDeep},
	{"empty array at depth 17", strings.Repeat("[", 18) + strings.Repeat("]", 18), detailTooDeep},
	{"object value at depth 17", strings.Repeat(`{"a":`, 17) + "1" + strings.Repeat("}", 17), detailTooDeep},
	{"too deep wins over a bad element", strings.Repeat("[", 17) + "x", detailTooDeep},
	{"too deep wins over a missing colon", strings.Repeat(`{"a":`, 16) + `{"b" x`, detailTooDeep},
	{"too deep, then the end", strings.Repeat("[", 17), detailNotJSON},
	{"too deep, then a brace", strings.Repeat("[", 17) + "}", detailNotJSON},
	{"too deep, then a bad key", strings.Repeat(`{"a":`, 16) + `{"b`, detailNotJSON},

	{"duplicate key", `{"a":1,"a":2}`, `duplicate key "a"`},
	{"duplicate nested key", `{"x":{"y":[{"a":1,"b":{},"a":2}]}}`, `duplicate key "a"`},
	{"duplicate after a nested object", `{"a":{"b":1},"b":1,"a":2}`, `duplicate key "a"`},
	{"escaped duplicate", `{"a":1,"\u0061":2}`, `duplicate key "a"`},
	{"escaped newline duplicate", `{"\n":1,"\u000A":2}`, `duplicate key "\n"`},
	{"escaped slash duplicate", `{"/":1,"\/":2}`, `duplicate key "/"`},
	{"escaped non-ASCII duplicate", `{"é":1,"\u00e9":2}`, `key "é" must be lower-case ASCII`},
	{"surrogate pair duplicate", `{"𝄞":1,"\ud834\udd1e":2}`, `key "𝄞" must be lower-case ASCII`},
	{"lone surrogates decode alike", `{"\ud800":1,"\udc00":2}`, `key "�" must be lower-case ASCII`},
	{"lone surrogate and U+FFFD", `{"\ud800":1,"�":2}`, `key "�" must be lower-case ASCII`},
	{"invalid UTF-8 decodes alike", "{\"\xff\":1,\"\xfe\":2}", `key "�" must be lower-case ASCII`},
	{"duplicate before a syntax error", `{"a":1,"a"`, `duplicate key "a"`},
	{"duplicate in a big object", manyKeys(40, "k3"), `duplicate key "k3"`},
	{"duplicate of the last small key", manyKeys(16, "k15"), `duplicate key "k15"`},
	{"duplicate of the first small key", manyKeys(17, "k0"), `duplicate key "k0"`},
	{"long duplicate key is cut", `{"` + strings.Repeat("k", 70) + `":1,"` + strings.Repeat("k", 70) + `":2}`, `duplicate key "` + strings.Repeat("k", 64) + `…"`},
}

// manyKeys is an object of n distinct keys k0..k(n-1), then dup as one more
// key when it is not empty.
func manyKeys(n int, dup string) string {
	var b strings.Builder
	b.WriteString("{")
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"k%d":%d`, i, i)
	}
	if dup != "" {
		fmt.Fprintf(&b, `,"%s":0`, dup)
	}
	b.WriteString("}")
	return b.String()
}

func TestCheckStrictAnswersLikeTheTokenWalk(t *testing.T) {
	for _, tc := range strictCases {
		t.Run(tc.name, func(t *testing.T) {
			got := checkStrict([]byte(tc.body))
			if detail := detailOf(got); detail != tc.detail {
				t.Errorf("checkStrict(%q) = %q, want %q", tc.body, detail, tc.detail)
			}
			if got != nil && got.Slug != SlugInvalidRequest {
				t.Errorf("checkStrict(%q) slug %q, want %q", tc.body, got.Slug, SlugInvalidRequest)
			}
			// The table must describe today's behaviour, not only the new code's.
			if ref := detailOf(checkStrictReference([]byte(tc.body))); ref != tc.detail {
				t.Errorf("reference(%q) = %q, want %q", tc.body, ref, tc.detail)
			}
		})
	}
}

// The key stack is the one allocation a list costs: the Token walk made
// thousands, which is why checkStrict was rewritten.
func TestCheckStrictAllocatesOnceForAList(t *testing.T) {
	body := listBody(100)
	if p := checkStrict(body); p != nil {
		t.Fatalf("list refused: %s", p.Detail)
	}
	if n := testing.AllocsPerRun(20, func() { checkStrict(body) }); n > 1 {
		t.Errorf("checkStrict allocates %v times per list, want at most 1", n)
	}
}

// FuzzCheckStrict holds checkStrict to the Token walk it replaced: the same
// verdict, slug and detail on every input.
func FuzzCheckStrict(f *testing.F) {
	for _, tc := range strictCases {
		f.Add([]byte(tc.body))
	}
	f.Add(listBody(3))
	f.Fuzz(func(t *testing.T, body []byte) {
		got, want := checkStrict(body), checkStrictReference(body)
		if (got == nil) != (want == nil) || (got != nil && (got.Slug != want.Slug || got.Detail != want.Detail)) {
			t.Fatalf("checkStrict(%q) = %s, the Token walk says %s", body, describe(got), describe(want))
		}
	})
}

func BenchmarkCheckStrict(b *testing.B) {
	body := listBody(100)
	for _, impl := range []struct {
		name  string
		check func([]byte) *Problem
	}{
		{"reference", checkStrictReference},
		{"scanner", checkStrict},
	} {
		b.Run(impl.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if p := impl.check(body); p != nil {
					b.Fatal(p.Detail)
				}
			}
		})
	}
}

// listBody is a POST outcomes list of n outcomes, all four kinds in turn,
// shaped like the API's examples.
func listBody(n int) []byte {
	hex := strings.Repeat("ab", 32)
	var b bytes.Buffer
	b.WriteString(`{"outcomes": [`)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, `{"reservation_id": "r-%04d", "repository": "acme/widgets", "occurred_unix_ms": %d, `, i, 1764460800000+i)
		switch i % 4 {
		case 0:
			fmt.Fprintf(&b, `"committed": {"bytes_stored": %d, "new_to_repo": 1, "new_to_store": 1, "refs": [{"name": "refs/heads/main", "new": "%s"}]}}`, 100+i, hex)
		case 1:
			b.WriteString(`"aborted": {"reason": "ref_conflict", "detail": "main moved"}}`)
		case 2:
			b.WriteString(`"expired": {}}`)
		case 3:
			fmt.Fprintf(&b, `"read_served": {"object": "%s", "bytes_served": 42}}`, hex)
		}
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

func detailOf(p *Problem) string {
	if p == nil {
		return ""
	}
	return p.Detail
}

func describe(p *Problem) string {
	if p == nil {
		return "accepted"
	}
	return fmt.Sprintf("%s %q", p.Slug, p.Detail)
}

// checkStrictReference is the Token-walking checkStrict that strictjson.go
// replaced, unchanged but for its names and for the string rule, which
// checks each string value's raw bytes as the walk meets it: the oracle for
// FuzzCheckStrict and the baseline for BenchmarkCheckStrict.
func checkStrictReference(body []byte) *Problem {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	w := &walkReference{body: body, dec: dec}
	if err := w.value(0, nil); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return NewProblem(SlugInvalidRequest, "the body must hold exactly one JSON value, with nothing after it")
	}
	return nil
}

type walkReference struct {
	body []byte
	dec  *json.Decoder
}

// rawString is the inside of the string token the decoder just returned,
// which began after offset from (past space, a comma or a colon).
func (w *walkReference) rawString(from int64) []byte {
	start := int(from)
	for strings.IndexByte(" \t\r\n,:", w.body[start]) >= 0 {
		start++
	}
	return w.body[start+1 : w.dec.InputOffset()-1]
}

// escapeReference matches one escape: \uXXXX with its digits, or any other.
var escapeReference = regexp.MustCompile(`\\(u([0-9a-fA-F]{4})|.)`)

// validStringReference: raw is valid UTF-8 and each surrogate escape is a
// high one directly followed by a low one.
func validStringReference(raw []byte) bool {
	if !utf8.Valid(raw) {
		return false
	}
	unit := func(m []int) int64 {
		if m[4] < 0 {
			return -1
		}
		n, _ := strconv.ParseInt(string(raw[m[4]:m[5]]), 16, 32)
		return n
	}
	ms := escapeReference.FindAllSubmatchIndex(raw, -1)
	for i := 0; i < len(ms); i++ {
		switch u := unit(ms[i]); {
		case 0xd800 <= u && u <= 0xdbff:
			if i+1 == len(ms) || ms[i+1][0] != ms[i][1] || unit(ms[i+1]) < 0xdc00 || unit(ms[i+1]) > 0xdfff {
				return false
			}
			i++
		case 0xdc00 <= u && u <= 0xdfff:
			return false
		}
	}
	return true
}

// pathReference names the value at path, outermost segment first.
func pathReference(path []string) string {
	out := ""
	if len(path) == 0 || path[0][0] == '[' {
		out = "the body"
	}
	for _, seg := range path {
		if out != "" && seg[0] != '[' {
			out += "."
		}
		out += seg
	}
	return out
}

func (w *walkReference) value(depth int, path []string) *Problem {
	dec := w.dec
	if depth > maxJSONDepth {
		return NewProblem(SlugInvalidRequest, "the body is nested too deeply")
	}
	before := dec.InputOffset()
	tok, err := dec.Token()
	if err != nil {
		return NewProblem(SlugInvalidRequest, "the body is not valid JSON")
	}
	if tok == nil {
		return NewProblem(SlugInvalidRequest, detailNull)
	}
	if _, ok := tok.(string); ok && !validStringReference(w.rawString(before)) {
		return NewProblem(SlugInvalidRequest, pathReference(path)+detailBadString)
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return NewProblem(SlugInvalidRequest, "the body is not valid JSON")
			}
			key, _ := k.(string)
			if !lowerASCII([]byte(key)) {
				return NewProblem(SlugInvalidRequest, fmt.Sprintf("key %q must be lower-case ASCII", truncate(key)))
			}
			if seen[key] {
				return NewProblem(SlugInvalidRequest, fmt.Sprintf("duplicate key %q", truncate(key)))
			}
			seen[key] = true
			if p := w.value(depth+1, append(slices.Clip(path), keySegment([]byte(key)))); p != nil {
				return p
			}
		}
		if _, err := dec.Token(); err != nil {
			return NewProblem(SlugInvalidRequest, "the body is not valid JSON")
		}
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if p := w.value(depth+1, append(slices.Clip(path), fmt.Sprintf("[%d]", i))); p != nil {
				return p
			}
		}
		if _, err := dec.Token(); err != nil {
			return NewProblem(SlugInvalidRequest, "the body is not valid JSON")
		}
	}
	return nil
}

// A wrong type inside the embedded outcome of a single-outcome body is named
// by its API path, not by the Go struct it was decoded into.
func TestTypeErrorsNameTheAPIField(t *testing.T) {
	var v struct {
		schema.Outcome
	}
	p := decodeStrict([]byte(`{"occurred_unix_ms":"1"}`), &v)
	if p == nil || p.Detail != "occurred_unix_ms must be a JSON number of the right range" {
		t.Fatalf("problem %+v", p)
	}
	for path, want := range map[string]string{"Outcome.committed.bytes_stored": "committed.bytes_stored", "outcomes.kind": "outcomes.kind", "Outcome": "the body"} {
		if got := apiField(path); got != want {
			t.Errorf("apiField(%q) = %q, want %q", path, got, want)
		}
	}
}
