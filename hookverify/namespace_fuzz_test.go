package hookverify

import (
	"encoding/json"
	"testing"
)

// FuzzBodyNamespace: any body is refused or yields the namespace that
// encoding/json, a lax reader (keys in any case, the last of duplicates),
// reads too: what is checked is what a handler reads. Never a panic.
func FuzzBodyNamespace(f *testing.F) {
	f.Add([]byte(`{"type":"outcome.expired","data":{"reservation_id":"r-1","namespace":"acme"}}`))
	f.Add([]byte(`{"data":{"Namespace":"a","namespace":"b"}}`))
	f.Add([]byte(`{"data":{"namespace":"a"},"data":{"namespace":"b"}}`))
	f.Add([]byte(`{"data":{"namespace":"\u0061"}} `))
	f.Fuzz(func(t *testing.T, body []byte) {
		ns, err := bodyNamespace(body)
		if err != nil {
			return
		}
		var lax struct{ Data struct{ Namespace string } }
		if err := json.Unmarshal(body, &lax); err != nil || lax.Data.Namespace != ns {
			t.Fatalf("accepted %q as %q; encoding/json reads %q (%v)", body, ns, lax.Data.Namespace, err)
		}
	})
}
