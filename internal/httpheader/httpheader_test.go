package httpheader

import "testing"

func TestIsSecret(t *testing.T) {
	for name, want := range map[string]bool{
		"Authorization": true, "proxy-authorization": true, "COOKIE": true, "X-Api-Key": true,
		"X-Auth-Token": true, "Client-Secret": true, "X-Idempotency-Key": true, "X-Authn": true,
		"Accept": false, "User-Agent": false, "X-Request-Id": false, "Content-Type": false, "Keep-Alive": false,
	} {
		if got := IsSecret(name); got != want {
			t.Errorf("IsSecret(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestHopByHop(t *testing.T) {
	for name, want := range map[string]bool{
		"connection": true, "Keep-Alive": true, "TRANSFER-ENCODING": true, "te": true, "Proxy-Connection": true,
		"Content-Type": false, "Stripe-Account": false, "Idempotency-Key": false,
	} {
		if got := HopByHop(name); got != want {
			t.Errorf("HopByHop(%q) = %v, want %v", name, got, want)
		}
	}
}
