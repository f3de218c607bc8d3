package webhook_test

import (
	"encoding/base64"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opjournal/opjournal/journal/webhook"
)

// The example vector of the Standard Webhooks libraries ("sign function
// works" in libraries/javascript/src/webhook.test.ts of
// github.com/standard-webhooks/standard-webhooks; the specification's text
// itself publishes none).
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorUnix      = 1614265330
	vectorBody      = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func mustSecret(t *testing.T, s string) webhook.Secret {
	t.Helper()
	sec, err := webhook.ParseSecret(s)
	if err != nil {
		t.Fatalf("ParseSecret: %v", err)
	}
	return sec
}

// randomSecret is a fresh whsec_ secret of 32 bytes.
func randomSecret(t *testing.T, seed byte) (string, webhook.Secret) {
	t.Helper()
	key := make([]byte, 32)
	for i := range key {
		key[i] = seed + byte(i)
	}
	s := webhook.SecretPrefix + base64.StdEncoding.EncodeToString(key)
	return s, mustSecret(t, s)
}

func TestSignMatchesTheStandardWebhooksVector(t *testing.T) {
	t.Parallel()
	got := webhook.Sign([]webhook.Secret{mustSecret(t, vectorSecret)}, vectorID, time.Unix(vectorUnix, 0), []byte(vectorBody))
	if got != vectorSignature {
		t.Fatalf("signature %s, want the published %s", got, vectorSignature)
	}
	h := http.Header{}
	h.Set(webhook.HeaderID, vectorID)
	h.Set(webhook.HeaderTimestamp, "1614265330")
	h.Set(webhook.HeaderSignature, vectorSignature)
	id, err := webhook.Verify([]webhook.Secret{mustSecret(t, vectorSecret)}, h, []byte(vectorBody), time.Unix(vectorUnix+10, 0), 5*time.Minute)
	if err != nil || id != vectorID {
		t.Fatalf("Verify of the published vector: %q, %v", id, err)
	}
}

// TestSignWithEverySecret: during a rotation each secret signs, in the
// file's order, and a receiver that knows either one verifies.
func TestSignWithEverySecret(t *testing.T) {
	t.Parallel()
	_, current := randomSecret(t, 1)
	_, previous := randomSecret(t, 100)
	at := time.Unix(1_700_000_000, 0)
	body := []byte(`{"type":"operation.awaiting_approval"}`)
	header := webhook.Sign([]webhook.Secret{current, previous}, "msg_1", at, body)
	sigs := strings.Fields(header)
	if len(sigs) != 2 || sigs[0] != webhook.Sign([]webhook.Secret{current}, "msg_1", at, body) ||
		sigs[1] != webhook.Sign([]webhook.Secret{previous}, "msg_1", at, body) {
		t.Fatalf("signature header %q: want the current secret's signature, a space, the previous one's", header)
	}
	h := http.Header{}
	h.Set(webhook.HeaderID, "msg_1")
	h.Set(webhook.HeaderTimestamp, "1700000000")
	h.Set(webhook.HeaderSignature, header)
	for _, s := range []webhook.Secret{current, previous} {
		if _, err := webhook.Verify([]webhook.Secret{s}, h, body, at, time.Minute); err != nil {
			t.Errorf("a receiver with one of the two secrets: %v", err)
		}
	}
}

func TestVerifyRefuses(t *testing.T) {
	t.Parallel()
	_, sec := randomSecret(t, 7)
	_, other := randomSecret(t, 70)
	at := time.Unix(1_700_000_000, 0)
	body := []byte(`{"a":1}`)
	signed := func() http.Header {
		h := http.Header{}
		h.Set(webhook.HeaderID, "msg_x")
		h.Set(webhook.HeaderTimestamp, "1700000000")
		h.Set(webhook.HeaderSignature, webhook.Sign([]webhook.Secret{sec}, "msg_x", at, body))
		return h
	}
	for _, tc := range []struct {
		name    string
		secrets []webhook.Secret
		edit    func(http.Header)
		body    string
		now     time.Time
	}{
		{"another secret", []webhook.Secret{other}, nil, string(body), at},
		{"a changed body", []webhook.Secret{sec}, nil, `{"a":2}`, at},
		{"re-encoded JSON", []webhook.Secret{sec}, nil, `{"a": 1}`, at},
		{"another id", []webhook.Secret{sec}, func(h http.Header) { h.Set(webhook.HeaderID, "msg_y") }, string(body), at},
		{"another timestamp", []webhook.Secret{sec}, func(h http.Header) { h.Set(webhook.HeaderTimestamp, "1700000001") }, string(body), at},
		{"a replay after the tolerance", []webhook.Secret{sec}, nil, string(body), at.Add(6 * time.Minute)},
		{"from the future", []webhook.Secret{sec}, nil, string(body), at.Add(-6 * time.Minute)},
		{"no signature", []webhook.Secret{sec}, func(h http.Header) { h.Del(webhook.HeaderSignature) }, string(body), at},
		{"a v1a signature only", []webhook.Secret{sec}, func(h http.Header) {
			h.Set(webhook.HeaderSignature, strings.Replace(h.Get(webhook.HeaderSignature), "v1,", "v1a,", 1))
		}, string(body), at},
		{"a truncated signature", []webhook.Secret{sec}, func(h http.Header) { h.Set(webhook.HeaderSignature, h.Get(webhook.HeaderSignature)[:10]) }, string(body), at},
		{"a bad timestamp", []webhook.Secret{sec}, func(h http.Header) { h.Set(webhook.HeaderTimestamp, "soon") }, string(body), at},
	} {
		h := signed()
		if tc.edit != nil {
			tc.edit(h)
		}
		if _, err := webhook.Verify(tc.secrets, h, []byte(tc.body), tc.now, 5*time.Minute); !errors.Is(err, webhook.ErrVerification) {
			t.Errorf("%s: Verify = %v, want ErrVerification", tc.name, err)
		}
	}
}

// TestParseSecretRefuses: every bad secret is refused, and no error
// repeats what was given.
func TestParseSecretRefuses(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"",
		"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",      // no prefix
		"whsk_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", // the asymmetric prefix
		"whsec_not base64 at all!!",             // not base64
		"whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 23)), // 184 bits
		"whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 65)), // over 512 bits
	} {
		_, err := webhook.ParseSecret(s)
		if err == nil {
			t.Errorf("ParseSecret(%q) accepted it", s)
			continue
		}
		if rest := strings.TrimPrefix(s, "whsec_"); len(rest) > 4 && strings.Contains(err.Error(), rest) {
			t.Errorf("ParseSecret's error %q repeats the secret", err)
		}
	}
	sec := mustSecret(t, vectorSecret)
	for _, shown := range []string{sec.String(), sec.GoString()} {
		if strings.Contains(shown, "MfKQ9r8G") {
			t.Errorf("a Secret prints its key: %s", shown)
		}
	}
}

func TestLoadSecrets(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	current, _ := randomSecret(t, 1)
	previous, _ := randomSecret(t, 2)
	good := filepath.Join(dir, "secrets")
	if err := os.WriteFile(good, []byte("# rotated 2026-12-01\n"+current+"\n\n  "+previous+"  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := webhook.LoadSecrets(good)
	if err != nil || len(got) != 2 {
		t.Fatalf("LoadSecrets = %d secrets, %v; want 2", len(got), err)
	}
	at := time.Unix(1, 0)
	if webhook.Sign(got, "m", at, nil) != webhook.Sign([]webhook.Secret{mustSecret(t, current), mustSecret(t, previous)}, "m", at, nil) {
		t.Error("the file's secrets are not the ones written, in their order")
	}

	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte(current+"\nwhsec_c2hvcnQ=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = webhook.LoadSecrets(bad)
	if err == nil || !strings.Contains(err.Error(), bad+":2:") || strings.Contains(err.Error(), "c2hvcnQ") ||
		strings.Contains(err.Error(), strings.TrimPrefix(current, "whsec_")) {
		t.Errorf("a bad second line: %v; want the file and line 2, and no secret", err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("# nothing yet\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := webhook.LoadSecrets(empty); err == nil || !strings.Contains(err.Error(), "no whsec_") {
		t.Errorf("a file without secrets: %v", err)
	}
	if _, err := webhook.LoadSecrets(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file was accepted")
	}
}

func TestCheckURL(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"https://hooks.example/approvals", "http://127.0.0.1:8081/hook?token=abc"} {
		if err := webhook.CheckURL(ok); err != nil {
			t.Errorf("CheckURL(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "hooks.example/approvals", "/approvals", "ftp://hooks.example/", "file:///etc/passwd",
		"javascript:alert(1)", "gopher://x", "https://", "https://user:secret-pw@hooks.example/", "http://%zz"} {
		err := webhook.CheckURL(bad)
		if err == nil {
			t.Errorf("CheckURL(%q) accepted it", bad)
		} else if strings.Contains(err.Error(), "secret-pw") {
			t.Errorf("CheckURL's error repeats the URL: %v", err)
		}
	}
}
