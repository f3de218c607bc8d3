package e2e

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/opjournal/opjournal/internal/testkit/standardwebhooks"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// hookReceiver is a real HTTP receiver of approval webhooks on a free
// port: it records every delivery and answers 200.
type hookReceiver struct {
	*httptest.Server
	mu  sync.Mutex
	got []hookDelivery
}

type hookDelivery struct {
	Header http.Header
	Body   []byte
}

func newHookReceiver(t *testing.T) *hookReceiver {
	t.Helper()
	r := &hookReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, hookDelivery{Header: req.Header.Clone(), Body: body})
		r.mu.Unlock()
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *hookReceiver) deliveries() []hookDelivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// key is the operation_key of a delivery's body.
func (d hookDelivery) key(t *testing.T) string {
	var b struct {
		Data struct {
			OperationKey string `json:"operation_key"`
		} `json:"data"`
	}
	if err := json.Unmarshal(d.Body, &b); err != nil {
		t.Fatalf("a delivery's body is not JSON: %s", d.Body)
	}
	return b.Data.OperationKey
}

// notifyPolicy is a policy whose create_payment needs approval above
// 1,000.00 and notifies url.
func notifyPolicy(t *testing.T, url string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, `actions:
  create_payment:
    integer_fields: [amount_minor]
    approval:
      when: "payload.amount_minor > 100000"
      notify: `+url+`
`)
	return path
}

func webhookSecretFile(t *testing.T) (path, secret string) {
	t.Helper()
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(i * 7)
	}
	secret = "whsec_" + base64.StdEncoding.EncodeToString(key)
	path = filepath.Join(t.TempDir(), "webhook-secrets")
	writeFile(t, path, "# the approval webhooks' secret\n"+secret+"\n")
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, secret
}

// webhookMetric reads one of the sender's series from /metrics (-1 if
// absent).
func webhookMetric(t *testing.T, srv *proc, series string) int {
	t.Helper()
	r := do(t, http.MethodGet, srv.BaseURL+"/metrics", nil)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\d+)$`).FindStringSubmatch(string(r.Body))
	if m == nil {
		return -1
	}
	v, _ := strconv.Atoi(m[1])
	return v
}

// TestApprovalWebhook: a Register over the policy's threshold makes one
// signed delivery that the Standard Webhooks library verifies, with the
// operation's identifiers and no payload or refs values; a Register under
// it, or a replay, makes none; the receiver changes nothing in the
// operation; and after a restart the operations still awaiting approval
// are sent again with the same webhook-id.
func TestApprovalWebhook(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, dbURL string) {
		recv := newHookReceiver(t)
		secretPath, secret := webhookSecretFile(t)
		args := []string{"--database-url", dbURL, "--policy", notifyPolicy(t, recv.URL+"/approvals?token=receiver-token"),
			"--webhook-secret-file", secretPath, "--public-url", "https://journal.example"}
		srv := startServer(t, args...)
		ctx := ctxFor(t)
		big := func(key string, amount int) *pb.RegisterResponse {
			res, err := srv.Client.Register(ctx, &pb.RegisterRequest{OperationKey: key, ActionType: "create_payment",
				Payload: mustStruct(t, `{"order_id":"817","amount_minor":`+strconv.Itoa(amount)+`,"currency":"RUB","card_token":"tok_payload-marker"}`),
				Refs:    map[string]string{"customer": "ref-marker-42"}})
			if err != nil {
				t.Fatalf("Register %s: %v", key, err)
			}
			return res
		}
		if res := big("payment:big-1", 490000); res.GetOperation().GetStatus() != pb.Status_STATUS_AWAITING_APPROVAL {
			t.Fatalf("Register over the threshold: %v, want awaiting approval", res.GetOperation().GetStatus())
		}
		before := lookup(t, ctx, srv.Client, "payment:big-1")
		eventually(t, callTimeout, func() (bool, string) {
			return len(recv.deliveries()) == 1, strconv.Itoa(len(recv.deliveries())) + " deliveries"
		})
		d := recv.deliveries()[0]
		payload, err := standardwebhooks.Verify(t, secret, d.Header, d.Body)
		if err != nil {
			t.Fatalf("the Standard Webhooks library refused the delivery: %v", err)
		}
		data, _ := payload["data"].(map[string]any)
		if payload["type"] != "operation.awaiting_approval" || data["operation_key"] != "payment:big-1" || data["action_type"] != "create_payment" ||
			data["request_hash"] != before.GetRequestHash() || data["tenant"] != "" || data["two_person"] != false ||
			data["console_url"] != "https://journal.example/console/operation?key=payment%3Abig-1" {
			t.Errorf("the delivery's payload: %s", d.Body)
		}
		if dl, _ := data["deadline"].(string); dl == "" || dl != before.GetApproval().GetDeadline().AsTime().UTC().Format("2006-01-02T15:04:05Z07:00") {
			t.Errorf("deadline %v, want the operation's %v", data["deadline"], before.GetApproval().GetDeadline().AsTime())
		}
		for _, secretish := range []string{"tok_payload-marker", "ref-marker-42", "490000", "RUB", "receiver-token"} {
			if strings.Contains(string(d.Body), secretish) {
				t.Errorf("the body carries %q, a payload or refs value: %s", secretish, d.Body)
			}
		}
		if strings.Contains(srv.Stderr(), strings.TrimPrefix(secret, "whsec_")) || strings.Contains(srv.Stderr(), "receiver-token") {
			t.Error("the server's log shows the secret or the notify URL's query")
		}

		// Under the threshold: pending, no delivery. A replay of the big
		// one: no second delivery. Then another big one, whose delivery
		// (once the queue is empty) shows that nothing else was sent.
		if res := big("payment:small", 9900); res.GetOperation().GetStatus() != pb.Status_STATUS_PENDING {
			t.Fatalf("Register under the threshold: %v, want pending", res.GetOperation().GetStatus())
		}
		if res := big("payment:big-1", 490000); res.GetCreated() {
			t.Fatal("the replay created the operation again")
		}
		big("payment:big-2", 250000)
		eventually(t, callTimeout, func() (bool, string) {
			n := len(recv.deliveries())
			q := webhookMetric(t, srv, "opjournal_webhook_queue_length")
			return n >= 2 && q == 0, strconv.Itoa(n) + " deliveries, queue " + strconv.Itoa(q)
		})
		keys := []string{}
		for _, d := range recv.deliveries() {
			keys = append(keys, d.key(t))
		}
		if !slices.Equal(keys, []string{"payment:big-1", "payment:big-2"}) {
			t.Errorf("deliveries for %v, want payment:big-1 and payment:big-2 only", keys)
		}
		if n := webhookMetric(t, srv, `opjournal_webhook_deliveries_total{outcome="delivered"}`); n != 2 {
			t.Errorf("opjournal_webhook_deliveries_total{outcome=\"delivered\"} = %d, want 2", n)
		}
		if after := lookup(t, ctx, srv.Client, "payment:big-1"); !proto.Equal(before, after) {
			t.Errorf("the delivery changed the operation:\n before %v\n after  %v", before, after)
		}

		// A restart: both questions are still open, so both are sent
		// again, with the ids (and bodies) of the first time.
		first := map[string]hookDelivery{}
		for _, d := range recv.deliveries() {
			first[d.key(t)] = d
		}
		if code := srv.Stop(); code != 0 {
			t.Fatalf("serve exited with %d", code)
		}
		srv = startServer(t, args...)
		eventually(t, callTimeout, func() (bool, string) {
			return len(recv.deliveries()) == 4, strconv.Itoa(len(recv.deliveries())) + " deliveries"
		})
		for _, d := range recv.deliveries()[2:] {
			was := first[d.key(t)]
			if d.Header.Get("webhook-id") != was.Header.Get("webhook-id") || string(d.Body) != string(was.Body) {
				t.Errorf("the re-send of %s: id %s body %s; first %s %s", d.key(t), d.Header.Get("webhook-id"), d.Body,
					was.Header.Get("webhook-id"), was.Body)
			}
			if _, err := standardwebhooks.Verify(t, secret, d.Header, d.Body); err != nil {
				t.Errorf("the re-send of %s does not verify: %v", d.key(t), err)
			}
		}
	})
}

// TestApprovalWebhookNeedsASecret: a policy with notify and no
// --webhook-secret-file is a usage error (exit 2) that says what to give;
// a bad secret file is refused without showing the secret.
func TestApprovalWebhookNeedsASecret(t *testing.T) {
	t.Parallel()
	pol := notifyPolicy(t, "https://hooks.example/approvals")
	base := []string{"serve", "--database-url", sqliteURL(t), "--policy", pol, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}
	code, out := runBinary(t, serverOpts{Dir: t.TempDir()}, base...)
	if code != 2 || !strings.Contains(out, "--webhook-secret-file") || !strings.Contains(out, "create_payment") || strings.Contains(out, `"msg":"serving"`) {
		t.Errorf("without a secret: exit %d, output:\n%s", code, out)
	}
	bad := filepath.Join(t.TempDir(), "secrets")
	writeFile(t, bad, "whsec_dG9vLXNob3J0LXNlY3JldA==\n")
	code, out = runBinary(t, serverOpts{Dir: t.TempDir()}, append(base, "--webhook-secret-file", bad)...)
	if code == 0 || !strings.Contains(out, bad+":1") || strings.Contains(out, "dG9vLXNob3J0LXNlY3JldA") {
		t.Errorf("a too short secret: exit %d, output:\n%s", code, out)
	}
	// The variable mirrors the flag.
	path, _ := webhookSecretFile(t)
	srv := startServerOpts(t, serverOpts{Env: []string{"OPJOURNAL_WEBHOOK_SECRET_FILE=" + path}}, "--database-url", sqliteURL(t), "--policy", pol)
	if n := webhookMetric(t, srv, "opjournal_webhook_queue_length"); n != 0 {
		t.Errorf("with OPJOURNAL_WEBHOOK_SECRET_FILE: queue length series %d, want 0", n)
	}
}
