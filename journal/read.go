package journal

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/store"
)

// The reads of the reconciler, the operators and the console: the list of
// operations (ListOperations) and an operation's history (ListEvents).

// ListFilter is what ListOperations keeps: the stores' own filter,
// declared once (store.ListFilter), named here for the journal's callers.
type ListFilter = store.ListFilter

// ListRequest filters and pages ListOperations. A KeyPrefix must be
// visible ASCII, at most MaxKeyLen.
type ListRequest struct {
	Caller
	store.ListFilter
	PageSize  int    // 0: DefaultPageSize; above MaxPageSize is capped
	PageToken string // from a previous ListResponse
	// Full returns payloads and results too (AIP-157's FULL view); the
	// default BASIC view leaves them out, so a page stays small whatever
	// the operations carry.
	Full bool
	// MaxBytes cuts the page before the operations' approximate size
	// (Size) would exceed it; 0 means opjournal.MaxPageBytes. The first
	// operation is always returned.
	MaxBytes int
}

// ListResponse is one page.
type ListResponse struct {
	Operations    []*opjournal.Operation
	NextPageToken string
}

// List pages through operations in key order. It returns
// CodeInvalidArgument for a malformed page token, page size, status or
// key prefix, and for an updated_at range that ends before it starts.
func (s *Service) List(ctx context.Context, req ListRequest) (ListResponse, error) {
	size, err := pageSize(req.PageSize)
	if err != nil {
		return ListResponse{}, err
	}
	after := ""
	if req.PageToken != "" {
		b, err := base64.RawURLEncoding.DecodeString(req.PageToken)
		if err != nil || len(b) < 2 || b[0] != 'k' || checkKey(string(b[1:])) != nil {
			return ListResponse{}, opjournal.Errorf(opjournal.CodeInvalidArgument, "page_token", "is not a token this server issued")
		}
		after = string(b[1:])
	}
	for _, st := range req.Statuses {
		if !st.Valid() {
			return ListResponse{}, opjournal.Errorf(opjournal.CodeInvalidArgument, "statuses", "%q is not a status", st)
		}
	}
	if req.Action != "" && len(req.Action) > MaxActionLen {
		return ListResponse{}, opjournal.Errorf(opjournal.CodeInvalidArgument, "action_type", "is %d bytes; the limit is %d", len(req.Action), MaxActionLen)
	}
	if err := opjournal.CheckRefs(req.Refs); err != nil {
		return ListResponse{}, err
	}
	if req.ParentKey != "" {
		if err := checkToken("parent_key", req.ParentKey, MaxKeyLen); err != nil {
			return ListResponse{}, err
		}
	}
	// A prefix is a fragment of a key, so the key's rules apply: a byte no
	// key may hold would only ever match nothing.
	if req.KeyPrefix != "" {
		if err := checkToken("key_prefix", req.KeyPrefix, MaxKeyLen); err != nil {
			return ListResponse{}, err
		}
	}
	if !req.UpdatedAfter.IsZero() && !req.UpdatedBefore.IsZero() && req.UpdatedAfter.After(req.UpdatedBefore) {
		return ListResponse{}, opjournal.Errorf(opjournal.CodeInvalidArgument, "updated_before",
			"%s is before updated_after %s", req.UpdatedBefore.UTC().Format(time.RFC3339Nano), req.UpdatedAfter.UTC().Format(time.RFC3339Nano))
	}
	ops, next, err := s.store.List(ctx, store.ListParams{
		Tenant: req.Tenant, ListFilter: req.ListFilter, After: after, Limit: size, Basic: !req.Full,
	})
	if err != nil {
		return ListResponse{}, fmt.Errorf("list operations: %w", err)
	}
	// Bound the page by bytes as well as by count: one tenant's large
	// payloads must never make a page exceed what a client accepts (gRPC's
	// default 4 MiB), or the reconciler could not list that tenant at all.
	budget := req.MaxBytes
	if budget <= 0 {
		budget = opjournal.MaxPageBytes
	}
	total := 0
	for i, op := range ops {
		if total += Size(op); total > budget && i > 0 {
			ops, next = ops[:i], ops[i-1].Key
			break
		}
	}
	res := ListResponse{Operations: ops}
	if next != "" {
		// Opaque to clients: a version byte, then the last key.
		res.NextPageToken = base64.RawURLEncoding.EncodeToString(append([]byte{'k'}, next...))
	}
	return res, nil
}

// Size approximates the encoded size of an operation in an answer: its
// payload, result and text fields plus a fixed allowance for the rest.
func Size(op *opjournal.Operation) int {
	n := 256 + len(op.Payload) + len(op.Result) + len(op.Key) + len(op.Action) + len(op.RequestHash) +
		len(op.ExternalID) + len(op.ErrorCode) + len(op.ReviewReason) + len(op.LeaseOwner)
	for _, id := range op.DuplicateExternalIDs {
		n += len(id) + 2
	}
	for k, v := range op.Refs {
		n += len(k) + len(v) + 4
	}
	return n + len(op.ParentKey)
}

// EventsRequest asks for one page of an operation's history.
type EventsRequest struct {
	Caller
	Key       string
	PageSize  int    // 0: DefaultPageSize; above MaxPageSize is capped
	PageToken string // from a previous EventsResponse
}

// EventsResponse is one page of a history, oldest first.
type EventsResponse struct {
	Events        []opjournal.Event
	NextPageToken string
}

// Events returns one page of an operation's history, oldest first: every
// event is reachable, however long the history.
func (s *Service) Events(ctx context.Context, req EventsRequest) (EventsResponse, error) {
	if err := checkKey(req.Key); err != nil {
		return EventsResponse{}, err
	}
	size, err := pageSize(req.PageSize)
	if err != nil {
		return EventsResponse{}, err
	}
	var after int64
	if req.PageToken != "" {
		b, err := base64.RawURLEncoding.DecodeString(req.PageToken)
		if err != nil || len(b) < 2 || b[0] != 'e' {
			return EventsResponse{}, opjournal.Errorf(opjournal.CodeInvalidArgument, "page_token", "is not a token this server issued")
		}
		if after, err = strconv.ParseInt(string(b[1:]), 10, 64); err != nil || after < 0 {
			return EventsResponse{}, opjournal.Errorf(opjournal.CodeInvalidArgument, "page_token", "is not a token this server issued")
		}
	}
	evs, next, err := s.store.Events(ctx, store.EventsParams{Tenant: req.Tenant, Key: req.Key, After: after, Limit: size})
	if err != nil {
		return EventsResponse{}, fmt.Errorf("events %q: %w", req.Key, err)
	}
	res := EventsResponse{Events: evs}
	if next != 0 {
		res.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte("e" + strconv.FormatInt(next, 10)))
	}
	return res, nil
}

// pageSize applies the default and the cap of a page size.
func pageSize(n int) (int, error) {
	switch {
	case n < 0:
		return 0, opjournal.Errorf(opjournal.CodeInvalidArgument, "page_size", "must not be negative")
	case n == 0:
		return DefaultPageSize, nil
	}
	return min(n, MaxPageSize), nil
}
