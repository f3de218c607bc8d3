// Package soak is opjournal's soak and fault harness: evidence that the
// journal loses nothing and duplicates nothing when things break.
//
// Run starts the REAL processes on a fresh PostgreSQL schema
// (soak_<seed>_<random>, dropped at the end unless Config.Keep): the test
// provider (opjournal-fakeprovider), one or two journal replicas
// (opjournal serve, each with application_name opjournal-soak-<run>-journal-N)
// and one or two reconcilers (opjournal-reconciler). They share a policy
// the harness writes (PolicyYAML): the three shipped actions with a 2 s
// lease, quick reconciliation, an in_flight_window of 7 s and escalation
// after 20 s; or, with --shipped-policy, the shipped policy as it is (see
// below). Inside the harness, Config.Agents simulated agents, each with
// its own SDK client (round-robin over the replicas, through a gRPC
// resolver that always names a live replica), work through intents 0, 1,
// 2, … whose keys (soak:<seed>:pay:<n>:intent-01, …:email:…, …:app:…) and
// payloads derive from the seed. Payments carry the key as
// Idempotency-Key, emails and applications in their reference field.
// Agents behave like real ones: after VerificationRequired,
// InProgressElsewhere or a journal error they retry the same key later;
// some retry in storms of immediate retries; some intents go to two agents
// at once; some agents crash mid-call (client and connection dropped
// before anything is recorded) and resume from the key alone; some give up
// on the provider early. A share of the AGENTS (--mix-no-heartbeat, 25 %)
// run their SDK client with client.WithHeartbeat(false): the SDK gives up
// their calls at the end of the first lease (VerificationRequired,
// "lease_expired") while the provider may still carry them out; the other
// agents' heartbeats (ExtendLease) keep the lease while a slow call runs.
// A share of the intents (--mix-large, 3 %) carry a payload member
// ("attachment") of LargeMemberBytes, just below the journal's 64 KiB
// limit, derived from the seed like the rest of the payload (an agent
// rebuilding the intent from its key gets the same bytes); they meet the
// same faults, so some end unknown and are reconciled, and the check reads
// each back from the journal.
//
// Meanwhile, on a schedule drawn from the seed: every fault kind of the
// provider at its rate (commit_then_timeout, timeout_before_commit,
// reject, error_after_commit, drop_connection_after_commit, slow — held
// --slow-delay — and error; errors and timeouts of the reconcilers'
// searches), on /emails and /applications (which do not deduplicate)
// two more kinds of slow call, held 1.5× and 3× the action's lease_seconds
// and then carried out whether or not the agent still waits
// (--rate-slow-1.5x-lease, --rate-slow-3x-lease), kill -9 of a journal
// replica or a reconciler
// every 10–30 s followed by a restart (on the same ports when they are
// free, else on new ones: agents follow through their resolvers,
// reconcilers are restarted against the new address), one drop of the
// journal's connection pool (pg_terminate_backend of its connections,
// found by application_name; the shared server is never restarted), and
// one outage of one action's search long enough for its unknown
// operations to be escalated. An operator resolves escalations during the
// load from the provider's records.
//
// Agents wait for the provider AgentTimeout on /payments, and
// AgentTimeout plus the longest slow-lease hold (3× the lease) on /emails
// and /applications, so that a patient agent with heartbeats sees a 3×
// call through; the timeout faults hold those routes as much longer. The
// policy must then let the provider finish: in_flight_window (a release
// waits visibility_lag + in_flight_window after the attempt ended) must
// cover the longest hold of a request the provider carries out — 3× the
// lease, 1.5× the lease, --slow-delay, whichever faults are on — plus
// --index-lag. Config.Validate refuses a shorter --in-flight-window (or,
// with --shipped-policy, a shipped in_flight_window that is too short),
// naming the flags: a release before the late effect is visible is a
// duplicate the journal cannot detect.
//
// Then the settle phase: no new intents, no faults, no kills; agents retry
// until each intent is settled (terminal, or needs_review) or the settle
// deadline passes. The deadline is --settle, or longer when the policy
// needs it (printed at the start): the longest agent wait, then
// visibility_lag + in_flight_window until a release, then the reconciler's
// longest backoff. The harness then waits until the slowest hold of the
// last unanswered call would be visible. The checks read the journal
// (ListOperations, ListEvents) and the provider's effects
// (fakeprovider.ControlClient):
//
//  1. no intent has more than one effect at the provider;
//  2. no registered operation is lost: every key an agent got a journal
//     answer for is in the journal;
//  3. every operation is succeeded, failed_final or needs_review, and every
//     intent handed out reached the journal;
//  4. no operation succeeded without an effect, and its external_id is the
//     provider's record for its key;
//  5. no failed_final operation has an effect.
//
// Also checked: no effect exists for a key the journal does not know (no
// call without a journal entry), no agent was told an outcome the journal
// does not keep, no history leaves a terminal state or skips a step, the
// same intent is never answered as a conflict, and the journal never
// refuses a valid request, and every large payload is in the journal as it
// was sent. Escalated operations are not violations; they are counted and
// listed. The summary and the progress lines also count the slow-lease
// faults of each kind that fired, the agents without heartbeats, the calls
// kept beyond their lease by heartbeats, the calls given up at the lease
// (and how many of those operations a reconciler found succeeded, or
// released), the large-payload intents (and how many went through unknown,
// were reconciled or released), and the releases (and the retries they
// allowed).
//
// # The shipped policy
//
// --shipped-policy writes policy.DefaultYAML() as it is to the run's
// policy file (its verifiers read ${PROVIDER_URL}, which the reconcilers
// get). The leases are the shipped ones (30 s for payments and emails, 60 s
// for applications), and so are the slow-lease holds (45 s and 90 s for
// emails, 90 s and 180 s for applications) and the agents' waits. There is
// no search outage: the shipped unknown_after_seconds (15–60 minutes)
// escalates nothing within a run. The settle deadline follows the
// shipped release delays (applications: 5 s + 4 min after the attempt
// ended), so a 5-minute run takes about 15. Validate checks the shipped
// policy too: with in_flight_window 2m for submit_application, a 3× call
// (180 s) would be released before its effect, which is why the shipped
// window is 4m.
//
// What a PASS proves: under those faults, with these settings, the
// protocol (journal + SDK + reconciler) kept one effect per intent and a
// record for every intent, and settled all of them. What it does not
// prove: exactly-once end to end (impossible), behaviour under faults not
// injected (a PostgreSQL crash or failover, clock skew, network
// partitions between replicas and the database), or correctness of a
// policy other than the one written here (or the shipped one with
// --shipped-policy). In particular in_flight_window must cover the longest
// a provider may still be working on a request the agent gave up on, and
// visibility_lag its index lag: a policy that releases before a late
// effect is visible lets emails and applications happen twice, the one
// misconfiguration the journal cannot detect, so Validate refuses it for
// the faults the soak injects.
//
// # Replaying a seed
//
// Every run prints its seed and the exact command that replays it, e.g.
//
//	opjournal-soak --seed=20261130 --agents=96 --duration=10m0s
//	make soak DURATION=10m AGENTS=96 SEED=20261130
//
// The same seed gives the same intents (keys, payloads, which are
// duplicated, stormed, crashed, impatient or large), the same agents
// without heartbeats, the same sequence of
// decisions of every provider fault rule, the same kill schedule (when,
// which process, how long it stays down), the same moment of the pool
// drop and the same search outage. Goroutine and process scheduling are
// not replayed, so a replay is the same experiment rather than the same
// trace: a violation that depends on a narrow race may need a few runs (or
// higher rates of the fault involved) to show again. Use --keep and
// --log-dir to keep the schema and the child processes' logs for the
// histories (opjournal ops show KEY against a journal on that schema).
//
// TestShortSoak runs a 15-second version in `go test`, with more
// slow-lease faults and large payloads, and checks from its summary that
// slow calls of both kinds, calls kept by heartbeats, calls given up at the
// lease by agents without heartbeats, large payloads through unknown and
// releases all happened, with no duplicate.
//
// With --pgbouncer (Config.PgBouncer) the replicas reach PostgreSQL only
// through a real PgBouncer in transaction pooling mode that the harness
// starts (pgbouncer.go): the schema is migrated first on the direct URL
// with `opjournal migrate`, and the pool drop then ends PgBouncer's
// server connections. TestShortSoakThroughPgBouncer runs the short soak
// so and checks that PgBouncer carried the replicas' transactions.
package soak
