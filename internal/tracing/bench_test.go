package tracing

import "testing"

// BenchmarkEnabled is what every instrumented spot costs while tracing is
// off: the one check it makes before doing anything else.
func BenchmarkEnabled(b *testing.B) {
	n := 0
	for b.Loop() {
		if Enabled() {
			n++
		}
	}
	_ = n
}
