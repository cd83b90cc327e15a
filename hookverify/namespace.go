package hookverify

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
)

// validNamespace is relay's namespace syntax, [a-z0-9][a-z0-9_-]{0,62}: one
// spelling per namespace, so comparing names is comparing bytes.
func validNamespace(ns string) bool {
	if len(ns) == 0 || len(ns) > 63 {
		return false
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || i > 0 && (c == '_' || c == '-')) {
			return false
		}
	}
	return true
}

// checkBodyNamespace requires body to be a JSON object whose data.namespace
// is signed. Both keys must have exactly that spelling and appear once: a
// JSON library that matches keys without regard to case, or keeps the first
// of two, would otherwise read another value than the one checked.
func checkBodyNamespace(body []byte, signed string) error {
	got, err := bodyNamespace(body)
	if err != nil {
		return errorf(ErrNamespace, "body: %v", err)
	}
	if got != signed {
		return errorf(ErrNamespace, "body's data.namespace is not the signed %s", HeaderMkitNamespace)
	}
	return nil
}

var errNotObject = errors.New("not a JSON object")

func bodyNamespace(body []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	var (
		ns       string
		seenData bool
	)
	err := members(dec, func(key string) error {
		if !strings.EqualFold(key, "data") {
			return skip(dec)
		}
		if key != "data" || seenData {
			return errors.New(`"data" appears twice or in another case`)
		}
		seenData = true
		var seenNS bool
		return members(dec, func(key string) error {
			if !strings.EqualFold(key, "namespace") {
				return skip(dec)
			}
			if key != "namespace" || seenNS {
				return errors.New(`data."namespace" appears twice or in another case`)
			}
			seenNS = true
			tok, err := dec.Token()
			if err != nil {
				return err
			}
			s, ok := tok.(string)
			if !ok {
				return errors.New("data.namespace is not a string")
			}
			ns = s
			return nil
		})
	})
	switch {
	case err != nil:
		return "", err
	case ns == "":
		return "", errors.New("no data.namespace")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return "", errors.New("data after the JSON object")
	}
	return ns, nil
}

// members reads one JSON object from dec, calling member with each key; member
// reads the key's value.
func members(dec *json.Decoder, member func(key string) error) error {
	tok, err := dec.Token()
	if err != nil {
		return errNotObject
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return errNotObject
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, ok := tok.(string)
		if !ok {
			return errNotObject
		}
		if err := member(key); err != nil {
			return err
		}
	}
	_, err = dec.Token() // the closing brace
	return err
}

// skip reads and drops one JSON value.
func skip(dec *json.Decoder) error {
	var v json.RawMessage
	return dec.Decode(&v)
}
