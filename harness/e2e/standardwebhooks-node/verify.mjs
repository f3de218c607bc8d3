// verify.mjs checks one delivery of the journal's webhooks with the
// Standard Webhooks project's own library (npm package standardwebhooks),
// not with the journal's code: an independent verifier.
//
// stdin: {"secret": "whsec_…", "headers": {"webhook-id": …, "webhook-timestamp": …,
//          "webhook-signature": …}, "body": "<the body exactly as received>"}
// stdout: the verified payload as JSON; exit status 1 with the library's
// error on stderr when the signature (or the timestamp's tolerance) fails.
import { Webhook } from "standardwebhooks";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const { secret, headers, body } = JSON.parse(input);
try {
  const payload = new Webhook(secret).verify(body, headers);
  process.stdout.write(JSON.stringify(payload) + "\n");
} catch (err) {
  process.stderr.write(`standardwebhooks: ${err.name}: ${err.message}\n`);
  process.exit(1);
}
