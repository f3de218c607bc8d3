package console_test

import (
	"fmt"
	"net/http"
	"testing"
)

// BenchmarkQueuesPage measures one queues page (counts, a page of the
// unknown queue and its overdue checks, rendering) over a tenant of 1,000 and
// of 20,000 operations on SQLite:
//
//	go test -run '^$' -bench QueuesPage -benchtime 200x ./server/console/
func BenchmarkQueuesPage(b *testing.B) {
	for _, n := range []int{1000, 20000} {
		b.Run(fmt.Sprintf("ops=%d", n), func(b *testing.B) {
			e := newEnv(b, true)
			for i := range n {
				e.unknownOp("team-a", fmt.Sprintf("pay-%06d", i), map[string]string{"batch": fmt.Sprint(i % 50)})
			}
			br := e.browser()
			br.signIn(operA)
			b.ResetTimer()
			for b.Loop() {
				if p := br.get("/console/queues?queue=unknown&refresh=off"); p.status != http.StatusOK {
					b.Fatalf("status %d", p.status)
				}
			}
		})
	}
}
