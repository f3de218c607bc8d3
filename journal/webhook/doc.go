// Package webhook tells a receiver, by a signed HTTP POST, that an
// operation is awaiting a person's approval: the action's
// approval.notify URL in the policy. The deliveries follow the Standard
// Webhooks specification (https://www.standardwebhooks.com), so any of
// its libraries verifies them.
//
// # The delivery
//
// The body is {"type":"operation.awaiting_approval","timestamp":…,"data":{tenant,
// operation_key, action_type, request_hash, requested_by (the principal id),
// requested_by_label, deadline,
// two_person, console_url}} ([Notification.Body]): identifiers and the
// approval's terms, never the payload's or the refs' values, because a
// receiver may log what it gets; a person opens the console to see the
// request. The headers are webhook-id ([Notification.MessageID]: the same
// for every re-send of one question), webhook-timestamp (the attempt's
// Unix time) and webhook-signature ([Sign]: "v1," and the base64
// HMAC-SHA256 of "id.timestamp.body" under each secret of the secrets
// file, space-separated while a secret is rotated).
//
// # Retries
//
// A [Sender] holds at most Config.QueueSize deliveries in memory. Notify
// never blocks: a full queue drops the notification, counts and logs it.
// A 2xx answer is success; 410 Gone stops; any other answer, a redirect,
// a refused connection or no answer within Config.Timeout is retried after
// an exponential backoff with jitter, up to Config.Attempts attempts
// (about 50 minutes with the defaults). A delivery's outcome never
// changes the operation: the sender only reads the journal.
//
// # At least once, across restarts
//
// The journal keeps no column of what was sent. Instead, when it starts
// and every Config.RescanEvery, the sender lists the operations still
// awaiting approval whose action has notify (Config.Pending, which
// [FromJournal] makes of the journal's ListOperations) and sends those
// this process has not delivered or given up on. After a restart, or
// from two replicas, a question may so arrive twice, with the same
// webhook-id: receivers deduplicate by it, as the specification asks.
//
// # SSRF
//
// The notify URL comes from the policy file, which only its author (an
// administrator of the journal) writes; no API call sets it. The policy
// refuses anything but an absolute http(s) URL without credentials
// ([CheckURL]), and the sender follows no redirect. The journal does not
// filter addresses itself: where the server may reach internal services
// that the policy's author may not, run it with HTTPS_PROXY/HTTP_PROXY
// set to a filtering egress proxy (such as smokescreen), which the
// sender's client uses.
package webhook
