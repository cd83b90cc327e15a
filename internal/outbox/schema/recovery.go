package schema

import (
	"encoding/binary"
	"encoding/hex"

	"github.com/hookrelay/relay/internal/store"
)

// A stream's job row ('j' endpoint, ClassJob.Key) holds its last recovery
// job: outbox's recovery.go runs it.

// RecoveryState is where a recovery is.
type RecoveryState uint8

// Recovery states.
const (
	RecoveryRunning RecoveryState = 1
	RecoveryDone    RecoveryState = 2
	// RecoveryAborted: the endpoint went, or is being deleted.
	RecoveryAborted RecoveryState = 3
)

func (s RecoveryState) String() string {
	switch s {
	case RecoveryRunning:
		return "running"
	case RecoveryDone:
		return "done"
	case RecoveryAborted:
		return "aborted"
	}
	return "unknown"
}

// Recovery is one recovery job.
type Recovery struct {
	ID       string
	Endpoint string
	State    RecoveryState
	// SinceMs and UntilMs are the range of acceptance times, [since, until).
	SinceMs, UntilMs int64
	// NextSeq is the next log row to examine; EndSeq the namespace's next
	// sequence number when the job started: no row at or after it is in
	// the range.
	NextSeq, EndSeq uint64
	// StartSeq is where the job began, for its progress.
	StartSeq uint64
	// Examined counts the log rows looked at, Queued the outcomes queued.
	Examined, Queued      uint64
	CreatedMs, FinishedMs int64
}

const recoveryLen = 1 + 16 + 1 + 8*9

// EncodeRecovery is version 1: id (16), state (1), since, until ms, start,
// next, end seq, examined, queued, created, finished ms (8 each).
func EncodeRecovery(r Recovery) (store.Value, error) {
	id, err := hex.DecodeString(r.ID)
	if err != nil || len(id) != 16 {
		return nil, invalidf("recovery id %q", r.ID)
	}
	v := make([]byte, 0, recoveryLen)
	v = append(v, codecV1)
	v = append(v, id...)
	v = append(v, byte(r.State))
	for _, n := range []uint64{uint64(r.SinceMs), uint64(r.UntilMs), r.StartSeq, r.NextSeq, r.EndSeq, r.Examined, r.Queued, uint64(r.CreatedMs), uint64(r.FinishedMs)} {
		v = binary.BigEndian.AppendUint64(v, n)
	}
	return v, nil
}

// DecodeRecovery decodes the job row of the stream of endpoint.
func DecodeRecovery(endpoint string, v store.Value) (Recovery, error) {
	rd := newReader("recovery", v)
	r := Recovery{Endpoint: endpoint, ID: hex.EncodeToString(rd.take(16)), State: RecoveryState(rd.u8())}
	r.SinceMs, r.UntilMs = rd.ms(), rd.ms()
	r.StartSeq, r.NextSeq, r.EndSeq, r.Examined, r.Queued = rd.u64(), rd.u64(), rd.u64(), rd.u64(), rd.u64()
	r.CreatedMs, r.FinishedMs = rd.ms(), rd.ms()
	if rd.err == nil && (r.State < RecoveryRunning || r.State > RecoveryAborted) {
		rd.fail("unknown state %d", r.State)
	}
	if err := rd.end(); err != nil {
		return Recovery{}, err
	}
	return r, nil
}
