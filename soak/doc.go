// Package soak is opjournal's soak and fault harness: evidence that the
// journal loses nothing and duplicates nothing when things break.
//
// Run starts the REAL processes on a fresh PostgreSQL schema
// (soak_<seed>_<random>, dropped at the end unless Config.Keep): the test
// provider (opjournal-fakeprovider), one or two journal replicas
// (opjournal serve, each with application_name opjournal-soak-<run>-journal-N)
// and one or two reconcilers (opjournal-reconciler). They share a policy
// the harness writes (PolicyYAML): the three shipped actions with a 2 s
// lease, quick reconciliation and escalation after 20 s. Inside the
// harness, Config.Agents simulated agents, each with its own SDK client
// (round-robin over the replicas, through a gRPC resolver that always
// names a live replica), work through intents 0, 1, 2, … whose keys
// (soak:<seed>:pay:<n>:intent-01, …:email:…, …:app:…) and payloads derive
// from the seed. Payments carry the key as Idempotency-Key, emails and
// applications in their reference field. Agents behave like real ones:
// after VerificationRequired, InProgressElsewhere or a journal error they
// retry the same key later; some retry in storms of immediate retries;
// some intents go to two agents at once; some agents crash mid-call
// (client and connection dropped before anything is recorded) and resume
// from the key alone; some give up on the provider early.
//
// Meanwhile, on a schedule drawn from the seed: every fault kind of the
// provider at its rate (commit_then_timeout, timeout_before_commit,
// reject, error_after_commit, drop_connection_after_commit, slow — held
// longer than the lease — and error; errors and timeouts of the
// reconcilers' searches), kill -9 of a journal replica or a reconciler
// every 10–30 s followed by a restart (on the same ports when they are
// free, else on new ones: agents follow through their resolvers,
// reconcilers are restarted against the new address), one drop of the
// journal's connection pool (pg_terminate_backend of its connections,
// found by application_name; the shared server is never restarted), and
// one outage of one action's search long enough for its unknown
// operations to be escalated. An operator resolves escalations during the
// load from the provider's records.
//
// Then the settle phase: no new intents, no faults, no kills; agents retry
// until each intent is settled (terminal, or needs_review) or the settle
// deadline passes. The checks read the journal (ListOperations, ListEvents)
// and the provider's effects (fakeprovider.ControlClient):
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
// refuses a valid request. Escalated operations are not violations; they
// are counted and listed.
//
// What a PASS proves: under those faults, with these settings, the
// protocol (journal + SDK + reconciler) kept one effect per intent and a
// record for every intent, and settled all of them. What it does not
// prove: exactly-once end to end (impossible), behaviour under faults not
// injected (a PostgreSQL crash or failover, clock skew, network
// partitions between replicas and the database), or correctness of a
// policy other than the one written here. In particular visibility_lag
// must cover the longest a provider may still be working on a request the
// agent gave up on (here --slow-delay) plus its index lag: with
// --visibility-lag 2s and the 3 s slow fault, the soak finds duplicate
// emails and applications (released before their late effect became
// visible), which is the one misconfiguration the journal cannot detect.
//
// # Replaying a seed
//
// Every run prints its seed and the exact command that replays it, e.g.
//
//	opjournal-soak --seed=20261130 --agents=96 --duration=10m0s
//	make soak DURATION=10m AGENTS=96 SEED=20261130
//
// The same seed gives the same intents (keys, payloads, which are
// duplicated, stormed, crashed or impatient), the same sequence of
// decisions of every provider fault rule, the same kill schedule (when,
// which process, how long it stays down), the same moment of the pool
// drop and the same search outage. Goroutine and process scheduling are
// not replayed, so a replay is the same experiment rather than the same
// trace: a violation that depends on a narrow race may need a few runs (or
// higher rates of the fault involved) to show again. Use --keep and
// --log-dir to keep the schema and the child processes' logs for the
// histories (opjournal ops show KEY against a journal on that schema).
//
// TestShortSoak runs a 15-second version in `go test`.
package soak
