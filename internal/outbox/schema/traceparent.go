package schema

// TraceParent is the span an outcome was accepted under (its ingest
// request's server span), kept in its log row so that every attempt to
// deliver it, on whichever process and however late, joins that trace. It
// holds W3C trace context's traceparent fields; tracestate is not kept.
// The zero value is no trace: an outcome accepted with tracing off.
type TraceParent struct {
	TraceID [16]byte
	SpanID  [8]byte
	// Flags are the W3C trace flags; bit 0 is sampled.
	Flags byte
}

// traceParentLen is a TraceParent's stored size: trace id, span id, flags.
const traceParentLen = 16 + 8 + 1

// Valid reports whether t names a span: W3C calls an all-zero trace or
// span id invalid.
func (t TraceParent) Valid() bool {
	return t.TraceID != [16]byte{} && t.SpanID != [8]byte{}
}

func appendTraceParent(v []byte, t TraceParent) []byte {
	v = append(v, t.TraceID[:]...)
	v = append(v, t.SpanID[:]...)
	return append(v, t.Flags)
}

func (r *reader) traceParent() TraceParent {
	var t TraceParent
	copy(t.TraceID[:], r.take(16))
	copy(t.SpanID[:], r.take(8))
	t.Flags = r.u8()
	if r.err == nil && !t.Valid() {
		r.fail("invalid trace parent")
	}
	return t
}
