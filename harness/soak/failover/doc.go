// Package failover is opjournal's failover harness (`make
// soak-failover`): evidence of what the journal keeps, and what it
// answers, when its PostgreSQL primary dies and a standby takes over.
//
// For each replication mode, Run builds a throwaway pair from Debian's
// PostgreSQL 15 binaries (run as the postgres user when we are root): a
// primary (initdb) and a streaming standby (pg_basebackup -R) whose
// walreceiver connects through a TCP proxy (internal/testkit/tcpproxy). The
// harness is the failover manager: it kills every process of the primary
// with SIGKILL, waits PromoteDelay (a real manager's detection), promotes
// the standby with pg_ctl promote, and rebuilds the old primary as the
// new standby with a fresh pg_basebackup before the next failover. This
// is deterministic where pg_auto_failover's monitor would add its own
// timing (and a third process to keep healthy) to every figure.
//
// Two journal replicas (opjournal serve) use ONE multi-host URL,
// postgres://…@127.0.0.1:A,127.0.0.1:B/postgres?target_session_attrs=read-write:
// pgx tries both hosts and keeps the one that accepts writes, so the same
// processes follow every promotion; golang-migrate takes the same URL at
// start-up. The harness never restarts them and checks at the end that
// their PIDs are unchanged. One reconciler talks to journal replica 1
// (over gRPC: it has no database URL of its own). Agents under load
// (payments, which the test provider deduplicates by Idempotency-Key,
// and a share of emails, which it does not) use the Go SDK
// (client.Execute) and retry the same key after any journal error.
//
// Every journal call of the agents passes an interceptor that keeps the
// ledger: per key the latest state a successful answer acknowledged
// (Register, Claim, ExtendLease, Mark*), recorded only after the answer,
// and that counts UNAVAILABLE and other errors per failover window
// (kill until both replicas answer a write again, as measured by a probe
// that registers a new key on each replica every 50 ms). An answer that
// contradicts a state acknowledged before the call began (created=true
// twice, NOT_FOUND, an earlier state) is a wrong answer. After each
// failover, and at the end, every ledger entry is looked up: found in the
// acknowledged state or later (per attempt: pending < in_progress <
// unknown = released < succeeded | failed_final; a later attempt is
// later; a terminal state only as itself), missing, or regressed. The
// provider's effects per key count duplicates.
//
// Sync mode: synchronous_standby_names = '*' whenever the standby
// streams, and every kill happens while pg_stat_replication says the
// standby is "sync". While the old primary is rebuilt the new primary
// runs with synchronous_standby_names = ” (as pg_auto_failover's
// wait_primary does), so writes go on; it is set back to '*' and the
// harness waits for "sync" before the next kill. PASS requires: no
// acknowledged operation missing or regressed, no wrong answer, no error
// other than UNAVAILABLE, no duplicate, every operation settled, no
// restart.
//
// Async mode: no synchronous standby; before each kill the proxy stalls
// the standby's replication for LagWindow and drops what it held at the
// kill, so the last acknowledged writes exist on the dead primary only.
// The report lists each acknowledged operation lost and its fate: a lost
// succeeded record leaves the operation in_progress, its lease runs out,
// and the reconciler, asking the provider by key, marks it succeeded
// with no second effect; a lost registration comes back only if the
// agent retries (a new registration, created=true a second time), and an
// agent that had its answer does not. PASS requires no duplicate and no
// restart; the losses are the measurement.
//
// Under Patroni (Config.Manager = ManagerPatroni, `make soak-failover
// MANAGER=patroni`) the same journal replicas, agents, ledger, reconciler
// and checks run against three PostgreSQL nodes, each under its own
// Patroni daemon, and one etcd, all on 127.0.0.1 under the run's
// directory (patroni.go). Patroni decides and promotes; the harness only
// injects each fault of Config.Scenarios (patroni_scenarios.go): a
// switchover (POST /switchover), kill -9 of the leader's node (Patroni and
// PostgreSQL; restarted afterwards, as a supervisor would), kill -9 of
// the leader's postmaster alone, SIGSTOP of the leader's PostgreSQL until
// another node is leader (then SIGCONT), SIGSTOP of the synchronous
// standby until Patroni picked another, SIGSTOP of etcd until the leader
// demoted itself, and (async) a replication stall before a kill. The
// journal's URL names the three nodes and no connect_timeout, so it runs
// on store/postgres's multi-host default. Each scenario reports the
// promotions it caused, the longest time a journal replica went without
// a write, and that time's bound from Patroni's ttl, loop_wait and
// retry_timeout and the journal's timeouts (Config.gapBound), which a
// scenario must not exceed. Why the etcd v2 API, and which settings the
// guarantee needs: docs/ha.md.
package failover
