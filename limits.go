package opjournal

import "time"

// The limits of the protocol: every layer (the journal, the stores, the
// SDKs in Go, Python and TypeScript, the reconciler) takes them from here.
// `make generate` writes them into client/python/opjournal/_limits.py and
// client/typescript/src/limits.ts (internal/cmd/genlimits), and CI checks
// that those are current.
const (
	// MaxKeyLen bounds operation_key: 1–200 visible ASCII characters (keys
	// travel in HTTP headers and URLs).
	MaxKeyLen = 200
	// MaxActionLen bounds action_type.
	MaxActionLen = 80
	// MaxWorkerIDLen bounds worker_id and actor: 1–200 visible ASCII characters.
	MaxWorkerIDLen = 200
	// MaxExternalIDLen bounds external_id, in bytes of UTF-8.
	MaxExternalIDLen = 200
	// MaxErrorCodeLen bounds error_code, in bytes of UTF-8.
	MaxErrorCodeLen = 100
	// MaxReasonLen bounds reasons and notes, in bytes of UTF-8.
	MaxReasonLen = 200
	// MaxNoteLen bounds an operator's note on an operation, in characters
	// (Unicode code points), not bytes: a note is prose for people.
	MaxNoteLen = 2000
	// MaxPageSize bounds page_size of the list calls.
	MaxPageSize = 1000
	// DefaultPageSize is the page size when none is given.
	DefaultPageSize = 100
	// MaxPageBytes cuts a page of ListOperations before it would exceed
	// this many bytes of protobuf, far below gRPC's 4 MiB message limit.
	MaxPageBytes = 1 << 20
	// MaxNextCheckSeconds bounds next_check_after_seconds.
	MaxNextCheckSeconds = 86400
	// MaxDuplicateExternalIDs bounds the distinct duplicate external_ids
	// an operation keeps; further reports are only counted.
	MaxDuplicateExternalIDs = 10
	// MaxRefs bounds the business references of one operation.
	MaxRefs = 16
	// MaxRefNameLen bounds a reference's name: 1–64 characters of
	// [a-z0-9_.-], starting with a letter or digit.
	MaxRefNameLen = 64
	// MaxRefValueLen bounds a reference's value: 1–200 bytes of UTF-8
	// without control characters.
	MaxRefValueLen = 200
	// MaxChildNameLen bounds the name of a child operation (ChildKey):
	// 1–64 characters of [a-z0-9_.-].
	MaxChildNameLen = 64
	// DefaultMaxPayloadBytes and DefaultMaxResultBytes bound payloads and
	// results as canonical JSON (configurable on the server).
	DefaultMaxPayloadBytes = 64 << 10
	DefaultMaxResultBytes  = 64 << 10
)

// The lease rules of the SDKs, as numbers (LeaseSafetyMargin and
// HeartbeatInterval apply them; the Python and TypeScript clients get
// them generated).
const (
	// LeaseMarginDivisor: the safety margin is the lease divided by it…
	LeaseMarginDivisor = 10
	// …but at least LeaseMarginMin and at most LeaseMarginMax.
	LeaseMarginMin = 500 * time.Millisecond
	LeaseMarginMax = 5 * time.Second
	// HeartbeatDivisor: heartbeats come every lease / HeartbeatDivisor, at
	// least HeartbeatMin apart.
	HeartbeatDivisor = 3
	HeartbeatMin     = 100 * time.Millisecond
)

// LeaseSafetyMargin is how long before the end of its lease an SDK stops
// waiting for the provider, cancels the call and records the outcome as
// unknown: a tenth of the lease, at least 500 ms and at most 5 s. It
// leaves time for the MarkUnknown to land while the lease is still live,
// and for the request to the provider to have left before the lease ends.
// The lease is measured on the SDK's monotonic clock from the moment it
// SENT the claim, so network delay only shortens it.
func LeaseSafetyMargin(lease time.Duration) time.Duration {
	return min(max(lease/LeaseMarginDivisor, LeaseMarginMin), LeaseMarginMax)
}

// HeartbeatInterval is how often an SDK extends a lease while its call to
// the provider runs: a third of the lease, so that two heartbeats in a row
// may fail before the lease is in danger.
func HeartbeatInterval(lease time.Duration) time.Duration {
	return max(lease/HeartbeatDivisor, HeartbeatMin)
}
