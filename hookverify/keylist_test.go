package hookverify_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/hookrelay/relay/hookverify"
)

const pubHex = "79b5562e8fe654f94078b112e8a98ba7901f853ae695bed7e0e3910bad049664"

func TestParseKeyListAcceptsRelaysList(t *testing.T) {
	t.Parallel()
	list, err := hookverify.ParseKeyList([]byte(`{"version":1,"keys":[
		{"keyId":"relay-a","alg":"ed25519","publicKey":"` + pubHex + `","notAfterMs":1764460800000},
		{"keyId":"relay-b","alg":"ed25519","publicKey":"` + pubHex + `","notBeforeMs":0,"comment":"ignored"}],
		"issuer":"ignored"}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Keys) != 2 || list.Keys[0].NotAfterMs == nil || *list.Keys[0].NotAfterMs != 1764460800000 ||
		list.Keys[1].NotBeforeMs == nil || *list.Keys[1].NotBeforeMs != 0 || list.Keys[1].NotAfterMs != nil {
		t.Errorf("parsed %+v", list)
	}
}

func TestParseKeyListIsStrict(t *testing.T) {
	t.Parallel()
	key := func(fields string) string {
		return `{"version":1,"keys":[{` + fields + `}]}`
	}
	good := `"keyId":"relay-a","alg":"ed25519","publicKey":"` + pubHex + `"`
	cases := map[string]string{
		"not JSON":        `version: 1`,
		"trailing data":   key(good) + ` {}`,
		"version 2":       `{"version":2,"keys":[{` + good + `}]}`,
		"no version":      `{"keys":[{` + good + `}]}`,
		"version string":  `{"version":"1","keys":[{` + good + `}]}`,
		"no keys":         `{"version":1,"keys":[]}`,
		"keys missing":    `{"version":1}`,
		"alg case":        key(strings.Replace(good, `"ed25519"`, `"Ed25519"`, 1)),
		"alg other":       key(strings.Replace(good, `"ed25519"`, `"es256"`, 1)),
		"uppercase hex":   key(strings.Replace(good, pubHex, strings.ToUpper(pubHex), 1)),
		"short key":       key(strings.Replace(good, pubHex, pubHex[:62], 1)),
		"long key":        key(strings.Replace(good, pubHex, pubHex+"00", 1)),
		"key id slash":    key(strings.Replace(good, "relay-a", "relay/a", 1)),
		"key id empty":    key(strings.Replace(good, "relay-a", "", 1)),
		"key id 65":       key(strings.Replace(good, "relay-a", strings.Repeat("k", 65), 1)),
		"no key id":       key(`"alg":"ed25519","publicKey":"` + pubHex + `"`),
		"no public key":   key(`"keyId":"relay-a","alg":"ed25519"`),
		"bounds inverted": key(good + `,"notBeforeMs":2,"notAfterMs":1`),
		"bound fraction":  key(good + `,"notBeforeMs":1.5`),
		"duplicate id":    `{"version":1,"keys":[{` + good + `},{` + good + `}]}`,
	}
	for name, data := range cases {
		if _, err := hookverify.ParseKeyList([]byte(data)); !errors.Is(err, hookverify.ErrKeyList) {
			t.Errorf("%s: got %v, want ErrKeyList", name, err)
		}
	}
}
