"""The journal decides the next step: every vector of
protocol/testdata/next_steps.json through _outcome_of (the pure function execute acts
on) and through execute itself, against a FakeJournal that gives exactly the
vector's answer. No server needed."""

import copy
import json
import unittest
from pathlib import Path

from _fake import FakeJournal, claimed
from _harness import opjournal  # noqa: F401

from google.protobuf import json_format

import opjournal
from opjournal import OutcomeKind
from opjournal._limits import LEASE_MARGIN_DIVISOR, LEASE_MARGIN_MAX_SECONDS, LEASE_MARGIN_MIN_SECONDS
from opjournal.errors import error_for_code
from opjournal.execute import _Call, _outcome_of
from opjournal.v1 import journal_pb2 as pb

VECTORS_FILE = Path(__file__).resolve().parent / ".." / ".." / ".." / "protocol" / "testdata" / "next_steps.json"


def load_vectors():
    with open(VECTORS_FILE) as f:
        doc = json.load(f)
    return doc["vectors"]


def answer_of(vector):
    """The journal's answer of a vector: a pb.RegisterResponse, or for an
    "error" vector the OpjournalError Register raises instead."""
    if "error" in vector:
        e = vector["error"]
        return error_for_code(e["code"], "the key is registered with other parameters", "payload")
    return json_format.ParseDict(copy.deepcopy(vector["answer"]), pb.RegisterResponse())


def margin(lease):
    return min(max(lease / LEASE_MARGIN_DIVISOR, LEASE_MARGIN_MIN_SECONDS), LEASE_MARGIN_MAX_SECONDS)


class VectorsTest(unittest.TestCase):
    def setUp(self):
        self.vectors = load_vectors()

    def test_the_file_has_vectors_of_every_kind(self):
        # A guard against testing nothing: every step and outcome appears.
        self.assertGreaterEqual(len(self.vectors), 10)
        kinds = {v["expect"].get("kind") for v in self.vectors}
        self.assertTrue({"succeeded", "failed_final", "in_progress_elsewhere", "verification_required",
                         "conflict", "awaiting_approval"} <= kinds, kinds)
        self.assertTrue(any(v["expect"].get("call") for v in self.vectors))
        self.assertTrue(any(v["expect"].get("error") for v in self.vectors))

    def check_outcome(self, name, out, expect):
        self.assertIsInstance(out, opjournal.Outcome, name)
        self.assertEqual(out.kind, expect["kind"], name)
        self.assertIs(out.kind, OutcomeKind(expect["kind"]), name)
        if "replayed" in expect:
            self.assertIs(out.replayed, expect["replayed"], name)
        else:
            self.assertFalse(out.replayed, name)
        for k in ("external_id", "result", "error_code", "needs_review"):
            if k in expect:
                self.assertEqual(getattr(out, k), expect[k], "%s: %s" % (name, k))
        if "retry_after_seconds" in expect:
            self.assertEqual(out.retry_after, float(expect["retry_after_seconds"]), name)
        if expect["kind"] == "conflict":
            self.assertIsInstance(out.cause, opjournal.PayloadMismatch, name)
            self.assertIsNone(out.operation, name)
        else:
            self.assertIsInstance(out.operation, opjournal.Operation, name)

    def test_every_vector_through_outcome_of(self):
        for v in self.vectors:
            name, expect = v["name"], v["expect"]
            with self.subTest(name):
                answer = answer_of(v)
                if expect.get("error"):
                    with self.assertRaises(opjournal.OpjournalError):
                        _outcome_of(answer)
                    continue
                got = _outcome_of(answer)
                if expect.get("call"):
                    self.assertEqual(got, _Call(expect["attempt"], expect["lease_seconds"]))
                else:
                    self.check_outcome(name, got, expect)

    def test_every_vector_through_execute(self):
        # The same answers given to execute: fn is called exactly for the
        # "call" vectors, with the vector's attempt, under its lease.
        for i, v in enumerate(self.vectors):
            name, expect = v["name"], v["expect"]
            with self.subTest(name):
                calls = []

                def fn(key, attempt, *, deadline):
                    calls.append((key, attempt, deadline.remaining()))
                    return opjournal.Effect("pay_v%d" % i, {"v": i})

                j = FakeJournal(answer_of(v))
                key = "vector:%d" % i
                if expect.get("error"):
                    with self.assertRaises(opjournal.OpjournalError):
                        opjournal.execute(j, key, "create_payment", {}, fn)
                    self.assertEqual(calls, [])
                    self.assertEqual(j.methods(), ["Register"])  # nothing recorded either
                    continue
                out = opjournal.execute(j, key, "create_payment", {}, fn)
                if expect.get("call"):
                    self.assertEqual([(k, a) for k, a, _ in calls], [(key, expect["attempt"])])
                    lease = expect["lease_seconds"]
                    left = calls[0][2]
                    self.assertLessEqual(left, lease - margin(lease))
                    self.assertGreater(left, lease - margin(lease) - 1.0)
                    self.assertEqual(out.kind, OutcomeKind.SUCCEEDED)
                    self.assertFalse(out.replayed)
                    self.assertEqual(out.external_id, "pay_v%d" % i)
                    ms = j.requests("MarkSucceeded")
                    self.assertEqual([(r.operation_key, r.attempt) for r in ms], [(key, expect["attempt"])])
                else:
                    self.assertEqual(calls, [], name)
                    self.check_outcome(name, out, expect)
                    self.assertEqual(j.methods(), ["Register"])


class OnlyNextDecidesTest(unittest.TestCase):
    """Answers where next and the operation's status disagree: next wins."""

    def run_answer(self, answer):
        calls = []
        j = FakeJournal(answer)
        out = opjournal.execute(j, "k:1", "create_payment", {}, lambda k, a: calls.append(a) or None)
        return out, calls

    def test_steps_this_sdk_does_not_act_on_never_call(self):
        for nxt in (pb.NEXT_STEP_UNSPECIFIED, pb.NEXT_STEP_CLAIM, 8, 99):
            with self.subTest(next=nxt):
                # Claimed, in progress, an attempt and a lease: everything
                # but the step says "go". Without the step it is an error.
                ans = claimed(attempt=1, lease_seconds=30)
                ans.next = nxt
                with self.assertRaises(opjournal.Internal) as cm:
                    _outcome_of(ans)
                self.assertIn("nothing was called", str(cm.exception))
                calls = []
                with self.assertRaises(opjournal.OpjournalError):
                    opjournal.execute(FakeJournal(ans), "k:1", "create_payment", {},
                                      lambda k, a: calls.append(a))
                self.assertEqual(calls, [])

    def test_call_provider_without_a_lease_or_attempt_is_an_error(self):
        for attempt, lease in ((1, 0), (0, 30)):
            with self.assertRaises(opjournal.Internal):
                _outcome_of(claimed(attempt=attempt, lease_seconds=lease))

    def test_replay_even_if_claimed_is_set(self):
        ans = pb.RegisterResponse(next=pb.NEXT_STEP_REPLAY, claimed=True, attempt=3, lease_seconds=30,
                                  operation=pb.Operation(status=pb.STATUS_IN_PROGRESS, external_id="pay_9"))
        out, calls = self.run_answer(ans)
        self.assertEqual((out.kind, out.replayed, out.external_id), (OutcomeKind.SUCCEEDED, True, "pay_9"))
        self.assertEqual(calls, [])

    def test_call_provider_whatever_the_status(self):
        ans = claimed(attempt=2, lease_seconds=30)
        ans.operation.status = pb.STATUS_SUCCEEDED
        out, calls = self.run_answer(ans)
        self.assertEqual(calls, [2])
        self.assertIs(out.kind, OutcomeKind.SUCCEEDED)
        self.assertFalse(out.replayed)

    def test_wait_on_an_unknown_status_is_wait(self):
        ans = pb.RegisterResponse(next=pb.NEXT_STEP_WAIT, retry_after_seconds=4,
                                  operation=pb.Operation(status=pb.STATUS_UNKNOWN, error_code="timeout"))
        out, calls = self.run_answer(ans)
        self.assertEqual((out.kind, out.retry_after), (OutcomeKind.IN_PROGRESS_ELSEWHERE, 4.0))
        self.assertEqual(calls, [])

    def test_claim_response_is_read_the_same_way(self):
        ans = pb.ClaimResponse(next=pb.NEXT_STEP_FAILED_FINAL,
                               operation=pb.Operation(status=pb.STATUS_FAILED_FINAL, error_code="card_declined"))
        out = _outcome_of(ans)
        self.assertEqual((out.kind, out.replayed, out.error_code), (OutcomeKind.FAILED_FINAL, True, "card_declined"))
        self.assertEqual(_outcome_of(pb.ClaimResponse(next=pb.NEXT_STEP_CALL_PROVIDER, attempt=4, lease_seconds=9)),
                         _Call(4, 9))

    def test_other_errors_are_raised(self):
        with self.assertRaises(opjournal.UnknownAction):
            _outcome_of(opjournal.UnknownAction(None, "no policy", "action_type"))


if __name__ == "__main__":
    unittest.main()
