package hookverify_test

import (
	"errors"
	"testing"

	"github.com/hookrelay/relay/hookverify"
)

// FuzzParseKeyList: any input is refused or yields a list whose every key
// meets the documented rules; never a panic.
func FuzzParseKeyList(f *testing.F) {
	f.Add([]byte(`{"version":1,"keys":[{"keyId":"relay-a","alg":"ed25519","publicKey":"` + pubHex + `","notBeforeMs":1}]}`))
	f.Add([]byte(`{"version":1,"keys":[]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		list, err := hookverify.ParseKeyList(data)
		if err != nil {
			if !errors.Is(err, hookverify.ErrKeyList) {
				t.Fatalf("error %v is not ErrKeyList", err)
			}
			return
		}
		if list.Version != 1 || len(list.Keys) == 0 {
			t.Fatalf("accepted %+v", list)
		}
		seen := map[string]bool{}
		for _, k := range list.Keys {
			if k.Alg != "ed25519" || len(k.PublicKey) != 64 || len(k.KeyID) == 0 || len(k.KeyID) > 64 || seen[k.KeyID] {
				t.Fatalf("accepted key %+v", k)
			}
			seen[k.KeyID] = true
		}
	})
}
