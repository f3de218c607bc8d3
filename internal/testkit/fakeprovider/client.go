package fakeprovider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ControlClient drives the control API of a provider running elsewhere
// (the opjournal-fakeprovider binary, or an httptest server): the same
// operations as the Provider's methods, over HTTP.
type ControlClient struct {
	baseURL string
	hc      *http.Client
}

// NewControlClient returns a client for the provider at baseURL
// ("http://127.0.0.1:8099"). A nil hc means http.DefaultClient.
func NewControlClient(baseURL string, hc *http.Client) *ControlClient {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &ControlClient{baseURL: strings.TrimSuffix(baseURL, "/"), hc: hc}
}

// AddFault adds a fault rule (POST /_control/faults).
func (c *ControlClient) AddFault(ctx context.Context, f Fault) (FaultStatus, error) {
	var st FaultStatus
	return st, c.do(ctx, http.MethodPost, "/_control/faults", f, &st)
}

// Faults lists the active fault rules (GET /_control/faults).
func (c *ControlClient) Faults(ctx context.Context) (FaultList, error) {
	var l FaultList
	return l, c.do(ctx, http.MethodGet, "/_control/faults", nil, &l)
}

// ClearFaults removes every fault rule (DELETE /_control/faults) and
// returns the list as it was.
func (c *ControlClient) ClearFaults(ctx context.Context) (FaultList, error) {
	var l FaultList
	return l, c.do(ctx, http.MethodDelete, "/_control/faults", nil, &l)
}

// Effects counts the stored effects (GET /_control/effects).
func (c *ControlClient) Effects(ctx context.Context) (EffectCounts, error) {
	var e EffectCounts
	return e, c.do(ctx, http.MethodGet, "/_control/effects", nil, &e)
}

// Lookup returns the effects under one effect key
// (GET /_control/effects?key=K).
func (c *ControlClient) Lookup(ctx context.Context, effectKey string) (KeyEffects, error) {
	var k KeyEffects
	return k, c.do(ctx, http.MethodGet, "/_control/effects?key="+url.QueryEscape(effectKey), nil, &k)
}

// Count returns how many effects are stored under an effect key.
func (c *ControlClient) Count(ctx context.Context, effectKey string) (int, error) {
	k, err := c.Lookup(ctx, effectKey)
	return k.Count, err
}

// Reset clears the provider (POST /_control/reset).
func (c *ControlClient) Reset(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/_control/reset", nil, nil)
}

// SetIndexLag changes the index lag (POST /_control/config).
func (c *ControlClient) SetIndexLag(ctx context.Context, d time.Duration) error {
	lag := d.String()
	return c.do(ctx, http.MethodPost, "/_control/config", configJSON{IndexLag: &lag}, nil)
}

// do sends one control request and decodes a 2xx answer into out.
func (c *ControlClient) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.baseURL+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("fakeprovider: %s %s: reading the answer: %w", method, path, err)
	}
	if res.StatusCode/100 != 2 {
		var e struct{ Error, Message string }
		_ = json.Unmarshal(raw, &e)
		if e.Error != "" {
			return fmt.Errorf("fakeprovider: %s %s: %s: %s: %s", method, path, res.Status, e.Error, e.Message)
		}
		return fmt.Errorf("fakeprovider: %s %s: %s", method, path, res.Status)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("fakeprovider: %s %s: decoding the answer: %w", method, path, err)
	}
	return nil
}
