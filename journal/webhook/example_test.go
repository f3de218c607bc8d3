package webhook_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/opjournal/opjournal/journal/webhook"
)

// A receiver checks a delivery with the secret it shares with the
// journal, then deduplicates by the id Verify returns. The values are the
// Standard Webhooks libraries' example.
func ExampleVerify() {
	secret, err := webhook.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		panic(err)
	}
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	body := []byte(`{"test": 2432232314}`) // the bytes received, never re-encoded
	now := time.Unix(1614265330, 0).Add(30 * time.Second)
	id, err := webhook.Verify([]webhook.Secret{secret}, h, body, now, 5*time.Minute)
	fmt.Println(id, err)
	_, err = webhook.Verify([]webhook.Secret{secret}, h, []byte(`{"test":2432232314}`), now, 5*time.Minute)
	fmt.Println(err)
	// Output:
	// msg_p5jXN8AQM9LWM0D4loKWxJek <nil>
	// webhook: verification failed: no signature matches
}
