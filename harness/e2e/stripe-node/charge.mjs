// Creates charges with stripe-node, the Stripe API's own Node client,
// pointed at opjournal-gateway instead of api.stripe.com: it sends form
// bodies, its own Idempotency-Key, and retries by itself
// (maxNetworkRetries) on 409, 5xx and lost connections.
//
//   GATEWAY_URL=http://127.0.0.1:8080 STRIPE_API_KEY=<the caller's journal token> node charge.mjs '[{"name":"a","key":"intent-a"},{"name":"b"}]'
//
// The "API key" stripe-node sends as its bearer token is the caller's
// journal token: the gateway knows who calls by it, and sends the
// provider its own credential instead.
// Each intent is one charges.create (with its idempotencyKey when it has
// one, else stripe-node makes its own), sent `times` times (default 1).
// One JSON line per call on stdout: {"name", "ok", "id"} or {"name",
// "ok": false, "status", "type", "message"}. The Go test (e2e) counts
// the charges at the provider.
import Stripe from 'stripe';

const gateway = new URL(process.env.GATEWAY_URL);
const stripe = new Stripe(process.env.STRIPE_API_KEY, {
  host: gateway.hostname,
  port: Number(gateway.port),
  protocol: gateway.protocol.replace(':', ''),
  maxNetworkRetries: Number(process.env.MAX_NETWORK_RETRIES ?? 8),
  timeout: 20000,
  telemetry: false,
});

const intents = JSON.parse(process.argv[2]);
for (const intent of intents) {
  for (let i = 0; i < (intent.times ?? 1); i++) {
    const options = intent.key ? { idempotencyKey: intent.key } : {};
    try {
      const charge = await stripe.charges.create(
        { amount: intent.amount ?? 1000, currency: 'usd', description: `intent ${intent.name}`, metadata: { intent: intent.name } },
        options,
      );
      console.log(JSON.stringify({ name: intent.name, ok: true, id: charge.id, status: charge.status, amount: charge.amount }));
    } catch (err) {
      console.log(JSON.stringify({ name: intent.name, ok: false, status: err.statusCode ?? 0, type: err.type ?? err.name, message: String(err.message).slice(0, 300) }));
    }
  }
}
// stripe-node keeps its connections alive; do not wait for them to idle out.
process.exit(0);
