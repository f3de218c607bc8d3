// Package agenttool is the agent's side of the test provider: the tool
// function an agent hands to client.Execute to create a payment, an email or
// an application at opjournal-fakeprovider. The demo, the soak harnesses and
// the e2e tests all act through it, so each harness counts the same calls;
// it is apart from package fakeprovider so the provider binary does not link
// the journal's client.
package agenttool

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/opjournal/opjournal/client"
)

// Post returns an agent's tool function for client.Execute: it
// POSTs body to the provider at baseURL+path, passing the operation key on
// as the Idempotency-Key header (idempotent providers) or in the body's
// "reference" field (providers that do not deduplicate but can be searched),
// and classifies the answer with client.ClassifyHTTP. It waits at most
// timeout for the provider and counts its calls in calls (if not nil).
func Post(baseURL, path string, body map[string]any, idempotent bool, timeout time.Duration, calls *atomic.Int32) func(context.Context, client.Attempt) (client.Effect, error) {
	hc := &http.Client{Timeout: timeout}
	return func(ctx context.Context, a client.Attempt) (client.Effect, error) {
		if calls != nil {
			calls.Add(1)
		}
		fields := make(map[string]any, len(body)+1)
		for k, v := range body {
			fields[k] = v
		}
		if !idempotent {
			fields["reference"] = a.Key
		}
		b, _ := json.Marshal(fields)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+path, bytes.NewReader(b))
		if err != nil {
			return client.Effect{}, err
		}
		req.Header.Set("Content-Type", "application/json")
		if idempotent {
			req.Header.Set("Idempotency-Key", a.Key)
		}
		resp, err := hc.Do(req)
		if err := client.ClassifyHTTP(resp, err); err != nil {
			if resp != nil {
				resp.Body.Close()
			}
			return client.Effect{}, err
		}
		defer resp.Body.Close()
		var created struct {
			ID string `json:"id"`
		}
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&created); err != nil || created.ID == "" {
			// A 2xx we cannot read: the effect happened, its id is unknown.
			return client.Effect{}, &client.UnknownError{Code: "unreadable_response", Err: fmt.Errorf("decode: %v", err)}
		}
		return client.Effect{ExternalID: created.ID, Result: map[string]any{"id": created.ID}}, nil
	}
}
