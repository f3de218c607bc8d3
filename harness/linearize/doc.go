// Package linearize checks that the journal's per-key protocol is
// linearizable: concurrent clients issue random commands on a few
// operation keys over gRPC and REST against a real journal, every call is
// recorded with its call and return time, and porcupine searches for a
// sequential order of the calls, consistent with real time, in which the
// protocol's independent model (protocol/model) gives every answer the
// journal gave.
package linearize
