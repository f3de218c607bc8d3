package webhook

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// The Standard Webhooks headers every delivery carries.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix marks a symmetric signing secret, as the specification
// serialises them: "whsec_" and the key's bytes in base64.
const SecretPrefix = "whsec_"

// The specification's bounds of a symmetric secret: at least 24 bytes (192
// bits), at most 64 (512 bits).
const (
	minSecretBytes = 24
	maxSecretBytes = 64
)

// Secret is one HMAC-SHA256 signing key. Its String and GoString never
// show the key, so a Secret that reaches a log line or an error leaks
// nothing.
type Secret struct {
	key []byte
}

// String hides the key.
func (Secret) String() string { return SecretPrefix + "[hidden]" }

// GoString hides the key from %#v too.
func (Secret) GoString() string { return "webhook.Secret{[hidden]}" }

// ParseSecret decodes "whsec_<base64>". It returns an error, which never
// contains the text given, for another prefix, bad base64 or a key
// outside 24..64 bytes.
func ParseSecret(s string) (Secret, error) {
	rest, ok := strings.CutPrefix(s, SecretPrefix)
	if !ok {
		return Secret{}, errors.New("a secret starts with " + SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		// Also accept the unpadded form some generators print.
		if key, err = base64.RawStdEncoding.DecodeString(rest); err != nil {
			return Secret{}, errors.New("a secret is " + SecretPrefix + " followed by base64")
		}
	}
	if len(key) < minSecretBytes || len(key) > maxSecretBytes {
		return Secret{}, fmt.Errorf("a secret's key must be %d to %d bytes (it is %d); make one with: printf 'whsec_%%s\\n' \"$(head -c 32 /dev/urandom | base64)\"",
			minSecretBytes, maxSecretBytes, len(key))
	}
	return Secret{key: key}, nil
}

// LoadSecrets reads a secrets file: one "whsec_" secret per line, the
// current one first, then those still accepted during a rotation; blank
// lines and lines starting with # are ignored. Every delivery is signed
// with each secret, so a receiver that knows any one of them verifies it.
// It returns an error naming the file and line (never the line's text)
// for a bad secret, and for a file with none.
func LoadSecrets(path string) ([]Secret, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("webhook secret file: %w", err)
	}
	var secrets []Secret
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s, err := ParseSecret(line)
		if err != nil {
			return nil, fmt.Errorf("webhook secret file %s:%d: %w", path, n, err)
		}
		secrets = append(secrets, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("webhook secret file %s: %w", path, err)
	}
	if len(secrets) == 0 {
		return nil, fmt.Errorf("webhook secret file %s holds no %s secret", path, SecretPrefix)
	}
	return secrets, nil
}

// Sign returns the webhook-signature header of a message: "v1," and the
// base64 HMAC-SHA256 of "id.timestamp.body" for each secret, separated by
// spaces (the specification's form for rotating secrets).
func Sign(secrets []Secret, id string, at time.Time, body []byte) string {
	var b strings.Builder
	for i, s := range secrets {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("v1,")
		b.WriteString(base64.StdEncoding.EncodeToString(s.mac(id, at.Unix(), body)))
	}
	return b.String()
}

// mac is the HMAC-SHA256 of the signed content "id.timestamp.body".
func (s Secret) mac(id string, unix int64, body []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write(strconv.AppendInt(nil, unix, 10))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// ErrVerification is what Verify returns for a delivery that is not
// signed by any of the secrets, or is outside the timestamp tolerance.
var ErrVerification = errors.New("webhook: verification failed")

// Verify checks a received delivery as a receiver must: the three
// headers are present, the timestamp is within tolerance of now (against
// replays), and one v1 signature matches one of the secrets (compared in
// constant time). body must be the bytes received, not re-encoded JSON.
// It returns the webhook-id to deduplicate by, or an error wrapping
// ErrVerification.
func Verify(secrets []Secret, h http.Header, body []byte, now time.Time, tolerance time.Duration) (string, error) {
	id, ts, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || ts == "" || sigs == "" {
		return "", fmt.Errorf("%w: missing %s, %s or %s", ErrVerification, HeaderID, HeaderTimestamp, HeaderSignature)
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "", fmt.Errorf("%w: %s is not a Unix time", ErrVerification, HeaderTimestamp)
	}
	if d := now.Sub(time.Unix(unix, 0)); d > tolerance || d < -tolerance {
		return "", fmt.Errorf("%w: %s is %s away from now", ErrVerification, HeaderTimestamp, d.Round(time.Second))
	}
	for _, sig := range strings.Fields(sigs) {
		version, value, ok := strings.Cut(sig, ",")
		if !ok || version != "v1" {
			continue // another scheme (v1a) or a future version
		}
		got, err := base64.StdEncoding.DecodeString(value)
		if err != nil {
			continue
		}
		for _, s := range secrets {
			if subtle.ConstantTimeCompare(got, s.mac(id, unix, body)) == 1 {
				return id, nil
			}
		}
	}
	return "", fmt.Errorf("%w: no signature matches", ErrVerification)
}
