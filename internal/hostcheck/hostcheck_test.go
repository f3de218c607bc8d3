package hostcheck

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestAllowed(t *testing.T) {
	allowed := []string{"journal.internal", "Box.LAN:8080"}
	for host, want := range map[string]bool{
		"localhost":                  true,
		"localhost:8080":             true,
		"LOCALHOST.":                 true,
		"127.0.0.1":                  true,
		"127.0.0.1:9090":             true,
		"127.1.2.3:80":               true,
		"[::1]":                      true,
		"[::1]:8080":                 true,
		"journal.internal":           true,
		"journal.internal:1234":      true,
		"box.lan:8080":               true,
		"box.lan:8081":               false,
		"box.lan":                    false,
		"attacker.example":           false,
		"attacker.example:8080":      false,
		"localhost.attacker.example": false,
		"10.0.0.5:8080":              false,
		"[::2]:8080":                 false,
		"":                           false,
		"localhost:":                 false,
		"[::1":                       false,
		"user@localhost":             false,
	} {
		if got := Allowed(host, allowed); got != want {
			t.Errorf("Allowed(%q) = %v, want %v", host, got, want)
		}
	}
	if Allowed("journal.internal", nil) {
		t.Error("a name not listed is allowed without a list")
	}
}

func TestLoopbackRefusesOtherHosts(t *testing.T) {
	reached := 0
	h := Loopback([]string{"journal.internal"})(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reached++
		_, _ = io.WriteString(w, "ok")
	}))
	for host, want := range map[string]int{"127.0.0.1:8080": 200, "journal.internal": 200, "rebound.attacker.example:8080": 421} {
		r := httptest.NewRequest("GET", "/v1/operations", nil)
		r.Host = host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("Host %s: status %d, want %d", host, w.Code, want)
		}
		if want != 200 && !strings.Contains(w.Body.String(), "--allowed-hosts") {
			t.Errorf("Host %s: the refusal does not say how to allow a name: %q", host, w.Body.String())
		}
	}
	if reached != 2 {
		t.Errorf("handler reached %d times, want 2", reached)
	}
}
