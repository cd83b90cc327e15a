package schema

import (
	"encoding/binary"
	"math"

	"github.com/hookrelay/relay/internal/store"
)

// A stream's minute rows count what it delivered and which calls failed in
// each minute since 1970. The key puts the minute before the endpoint ('m'
// minute(4) endpoint), so the rows of every stream older than a given
// minute are one range at the start of the class.

// MinuteMs is the length of a minute row's minute.
const MinuteMs = 60_000

// Minute is one minute of a stream.
type Minute struct {
	// StartMs is when the minute began.
	StartMs int64
	// Delivered counts the rows acknowledged in the minute, synthetic ones
	// included; a resent outcome counts again when it is delivered again.
	Delivered uint64
	// Failed counts the calls that failed in the minute.
	Failed uint64
}

const minuteLen = 1 + 2*8

// minuteHeader precedes a minute row's two counters, the layout store.Add
// adds to.
var minuteHeader = store.Value{codecV1}

// MinuteOf is the minute holding ms; ms before 1970 or past 2^32 minutes
// (year 10136) are in no minute.
func MinuteOf(ms int64) (uint32, bool) {
	if ms < 0 || ms/MinuteMs > math.MaxUint32 {
		return 0, false
	}
	return uint32(ms / MinuteMs), true
}

// MinuteKeyOf is the key of the row of minute of the stream of endpoint, an
// id already checked. An empty endpoint is where the minute's rows start.
func MinuteKeyOf(minute uint32, endpoint string) store.Key {
	b := make([]byte, 0, 5+len(endpoint))
	b = append(b, byte(ClassMinute))
	b = binary.BigEndian.AppendUint32(b, minute)
	return store.Key(append(b, endpoint...))
}

// MinuteKey is the key of the minute row of the stream of endpoint that
// holds atMs.
func MinuteKey(endpoint string, atMs int64) (store.Key, error) {
	if err := ValidateEndpointID(endpoint); err != nil {
		return "", err
	}
	m, ok := MinuteOf(atMs)
	if !ok {
		return "", invalidf("time %d ms is in no minute", atMs)
	}
	return MinuteKeyOf(m, endpoint), nil
}

// MinuteRange is the key range of every minute row of the namespace, oldest
// minute first.
func MinuteRange() (start, end store.Key) { return ClassRange(ClassMinute) }

// EncodeMinute is version 1, delivered u64, failed u64.
func EncodeMinute(m Minute) store.Value {
	v := make([]byte, 0, minuteLen)
	v = append(v, codecV1)
	v = binary.BigEndian.AppendUint64(v, m.Delivered)
	return binary.BigEndian.AppendUint64(v, m.Failed)
}

// DecodeMinute decodes a minute row's counts; StartMs is the key's.
func DecodeMinute(v store.Value) (Minute, error) {
	r := newReader("minute", v)
	m := Minute{Delivered: r.u64(), Failed: r.u64()}
	if err := r.end(); err != nil {
		return Minute{}, err
	}
	return m, nil
}

// AddMinute is the Add of delivered rows and failed calls to the row of
// minute of the stream of endpoint, an id already checked. An absent row
// counts as zeros.
func AddMinute(minute uint32, endpoint string, delivered, failed uint64) store.Write {
	return store.Write{Kind: store.Add, Key: MinuteKeyOf(minute, endpoint), Value: minuteHeader,
		Deltas: []int64{int64(delivered), int64(failed)}}
}
