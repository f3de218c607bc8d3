"""execute waits for a person's approval, against the real opjournal binary
with a policy that asks for one above 1,000.00 and a tokens file (an agent
and an operator of one tenant). The provider counts every call."""

import asyncio
import contextlib
import io
import os
import re
import threading
import time
import unittest

from _harness import ROOT, Provider, Server, make_token, new_key, policy_file, tmpdir, wait_for

import opjournal
import opjournal.aio
from opjournal.v1 import journal_pb2 as pb

POLICY = """actions:
  create_payment:
    approval:
      when: "payload.amount_minor > 100000"
      approvers: [operator, admin]
"""

server = None
tokens = {}


def setUpModule():
    global server
    agent, agent_entry = make_token("agent-1", "acme", "agent")
    operator, operator_entry = make_token("alice", "acme", "operator")
    path = os.path.join(tmpdir(), "tokens.yaml")
    with open(path, "w") as f:
        f.write("tokens:\n" + agent_entry + operator_entry)
    tokens.update(agent=agent, operator=operator)
    server = Server("--policy", policy_file(POLICY), "--auth-file", path)


def tearDownModule():
    server.stop()


def payment(amount):
    return {"order_id": "817", "amount_minor": amount, "currency": "RUB"}


class Approvals:
    """What both the blocking and the asyncio tests share: the provider, an
    agent's Journal and an operator's."""

    def setUp(self):
        self.provider = Provider()
        self.addCleanup(self.provider.stop)
        self.operator = server.journal(token=tokens["operator"])
        self.addCleanup(self.operator.close)

    def pay(self, payload):
        return lambda key, attempt: self.provider.pay(key, payload)

    def awaiting(self, key):
        """The operator's record of key once it awaits approval."""
        def look():
            try:
                op = self.operator.lookup(key)
            except opjournal.NotFound:
                return None
            return op if op.status == "awaiting_approval" else None
        return wait_for(look, what="%s awaiting approval" % key)

    def approve(self, key, request_hash):
        self.operator.stub.Approve(pb.ApproveRequest(operation_key=key, request_hash=request_hash,
                                                     reason="checked the invoice"),
                                   metadata=self.operator.metadata, timeout=5)

    def reject(self, key, request_hash):
        self.operator.stub.Reject(pb.RejectRequest(operation_key=key, request_hash=request_hash,
                                                   reason="not ordered"),
                                  metadata=self.operator.metadata, timeout=5)


class BlockingApprovalTest(Approvals, unittest.TestCase):
    def setUp(self):
        super().setUp()
        self.agent = server.journal(token=tokens["agent"])
        self.addCleanup(self.agent.close)

    def execute(self, key, amount, **kw):
        return opjournal.execute(self.agent, key, "create_payment", payment(amount), self.pay(payment(amount)), **kw)

    def in_thread(self, key, amount, **kw):
        box = {}

        def run():
            try:
                box["out"] = self.execute(key, amount, **kw)
            except BaseException as e:  # handed to the test
                box["err"] = e
        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t, box

    def test_below_the_threshold_runs_at_once(self):
        out = self.execute(new_key(), 50000, approval_wait=60)
        self.assertEqual((out.kind, out.replayed), ("succeeded", False))
        self.assertEqual(self.provider.calls, 1)

    def test_not_decided_in_time_calls_nothing(self):
        key = new_key()
        t = time.monotonic()
        out = self.execute(key, 250000, approval_wait=1.5)
        took = time.monotonic() - t
        self.assertIs(out.kind, opjournal.OutcomeKind.AWAITING_APPROVAL)
        self.assertEqual(out.kind, "awaiting_approval")
        self.assertGreaterEqual(took, 1.5)
        self.assertLess(took, 5)
        self.assertGreaterEqual(out.retry_after, 1)
        rec = self.awaiting(key)
        self.assertEqual((out.operation.operation_key, out.operation.request_hash), (key, rec.request_hash))
        self.assertEqual(out.operation.status, "awaiting_approval")
        # What a UI shows about the question: why, who asked, who may decide.
        a = rec.approval
        self.assertIsInstance(a, opjournal.Approval)
        self.assertTrue(a.required)
        self.assertEqual((a.rule, a.requested_by, a.approvals), ("payload.amount_minor > 100000", "agent-1", ()))
        self.assertEqual(set(a.approvers), {"operator", "admin"})
        self.assertIsNotNone(a.deadline)
        with self.assertRaises(opjournal.NotSucceeded) as cm:
            out.check()
        self.assertIn("awaits a person's approval", str(cm.exception))
        # A retry while it still waits calls nothing either; no wait: at once.
        again = self.execute(key, 250000)
        self.assertEqual(again.kind, "awaiting_approval")
        self.assertEqual(self.provider.calls, 0)
        # Listing by the new status finds it.
        page = self.operator.list_operations(statuses=["awaiting_approval"])
        self.assertIn(key, [op.operation_key for op in page.operations])

    def test_approved_while_waiting_calls_the_provider_once(self):
        key = new_key()
        t, box = self.in_thread(key, 490000, approval_wait=30)
        rec = self.awaiting(key)
        with self.assertRaises(opjournal.PayloadMismatch):  # only the hash the approver saw
            self.operator._call("Approve", pb.ApproveRequest(operation_key=key, request_hash="0" * 64, reason="x"))
        self.approve(key, rec.request_hash)
        t.join(10)
        self.assertFalse(t.is_alive(), "execute did not return after the approval")
        out = box.get("out")
        self.assertIsNotNone(out, box.get("err"))
        self.assertEqual((out.kind, out.replayed), ("succeeded", False))
        self.assertEqual(self.provider.calls, 1)
        again = self.execute(key, 490000, approval_wait=30)
        self.assertEqual((again.kind, again.replayed, again.external_id), ("succeeded", True, out.external_id))
        self.assertEqual(self.provider.calls, 1)
        self.assertEqual([(d.principal, d.reason) for d in self.operator.lookup(key).approval.approvals],
                         [("alice", "checked the invoice")])

    def test_a_later_execute_after_the_approval_calls_once(self):
        key = new_key()
        out = self.execute(key, 300000)
        self.assertEqual(out.kind, "awaiting_approval")
        self.approve(key, out.operation.request_hash)
        later = self.execute(key, 300000)
        self.assertEqual((later.kind, later.replayed), ("succeeded", False))
        self.assertEqual(self.provider.calls, 1)

    def test_rejected_is_the_refusal_replayed(self):
        key = new_key()
        t, box = self.in_thread(key, 990000, approval_wait=30)
        self.reject(key, self.awaiting(key).request_hash)
        t.join(10)
        out = box.get("out")
        self.assertIsNotNone(out, box.get("err"))
        self.assertEqual((out.kind, out.error_code), ("failed_final", "approval_rejected"))
        again = self.execute(key, 990000)
        self.assertEqual((again.kind, again.replayed, again.error_code), ("failed_final", True, "approval_rejected"))
        self.assertEqual(self.provider.calls, 0)

    def test_cancel_ends_the_wait_promptly(self):
        key = new_key()
        cancel = threading.Event()
        t, box = self.in_thread(key, 500000, approval_wait=60, cancel=cancel)
        self.awaiting(key)
        cancelled = time.monotonic()
        cancel.set()
        t.join(5)
        self.assertFalse(t.is_alive())
        self.assertLess(time.monotonic() - cancelled, 1.0)
        out = box.get("out")
        self.assertIsNotNone(out, box.get("err"))
        self.assertEqual(out.kind, "awaiting_approval")
        self.assertIn("cancelled", out.message)
        self.assertEqual(self.provider.calls, 0)

    def test_the_sdks_page_example(self):
        # docs/sdks.md's "Waiting for an approval", as written, while an
        # operator approves on another connection.
        text = (ROOT / "docs" / "sdks.md").read_text()
        m = re.search(r"<!-- test: approval -->\n```python\n(.*?)```", text, re.S)
        self.assertIsNotNone(m, "docs/sdks.md has no Python approval block")
        key, order = new_key(), payment(2500000)
        t = threading.Thread(target=lambda: self.approve(key, self.awaiting(key).request_hash), daemon=True)
        t.start()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(m.group(1), "docs/sdks.md:approval", "exec"),
                 {"opjournal": opjournal, "journal": self.agent, "key": key, "order": order, "charge": self.pay(order)})
        t.join(10)
        self.assertEqual(out.getvalue(), "charged once: pay_1\n")
        self.assertEqual(self.provider.calls, 1)

    def test_a_bad_approval_wait_is_refused_before_any_call(self):
        for bad in (-1, "10", True, float("nan")):
            with self.assertRaises(opjournal.InvalidArgument):
                self.execute(new_key(), 250000, approval_wait=bad)
        with self.assertRaises(opjournal.InvalidArgument):
            self.agent.lookup(new_key(), wait_seconds=61)

    def test_the_decorator_waits_too(self):
        @opjournal.idempotent(self.agent, action="create_payment", key="{k}", payload=["order_id", "amount_minor"],
                              approval_wait=0.2)
        def create_payment(k, order_id, amount_minor, *, op_key):
            return self.provider.pay(op_key, {"order_id": order_id, "amount_minor": amount_minor})
        self.assertEqual(create_payment(new_key(), "817", 250000).kind, "awaiting_approval")
        self.assertEqual(self.provider.calls, 0)


class AsyncioApprovalTest(Approvals, unittest.TestCase):
    def run_async(self, coro):
        return asyncio.run(coro)

    async def execute(self, journal, key, amount, **kw):
        async def charge(k, attempt):
            return await asyncio.to_thread(self.provider.pay, k, payment(amount))
        return await opjournal.aio.execute(journal, key, "create_payment", payment(amount), charge, **kw)

    def test_approved_while_waiting_calls_the_provider_once(self):
        key = new_key()

        async def main():
            async with opjournal.aio.Journal(server.grpc_addr, token=tokens["agent"], timeout=5) as j:
                task = asyncio.ensure_future(self.execute(j, key, 490000, approval_wait=30))
                rec = await asyncio.to_thread(self.awaiting, key)
                await asyncio.to_thread(self.approve, key, rec.request_hash)
                out = await asyncio.wait_for(task, 10)
                again = await self.execute(j, key, 490000)
                return out, again
        out, again = self.run_async(main())
        self.assertEqual((out.kind, out.replayed), ("succeeded", False))
        self.assertEqual((again.kind, again.replayed), ("succeeded", True))
        self.assertEqual(self.provider.calls, 1)

    def test_not_decided_in_time_and_rejected(self):
        key = new_key()

        async def main():
            async with opjournal.aio.Journal(server.grpc_addr, token=tokens["agent"], timeout=5) as j:
                late = await self.execute(j, key, 250000, approval_wait=1.2)
                task = asyncio.ensure_future(self.execute(j, key, 250000, approval_wait=30))
                await asyncio.to_thread(self.reject, key, late.operation.request_hash)
                return late, await asyncio.wait_for(task, 10), await self.execute(j, key, 250000)
        late, rejected, replay = self.run_async(main())
        self.assertEqual(late.kind, "awaiting_approval")
        self.assertEqual(late.operation.request_hash, self.operator.lookup(key).request_hash)
        self.assertEqual((rejected.kind, rejected.error_code), ("failed_final", "approval_rejected"))
        self.assertEqual((replay.kind, replay.replayed), ("failed_final", True))
        self.assertEqual(self.provider.calls, 0)

    def test_cancel_ends_the_wait_promptly(self):
        key = new_key()

        async def main():
            async with opjournal.aio.Journal(server.grpc_addr, token=tokens["agent"], timeout=5) as j:
                task = asyncio.ensure_future(self.execute(j, key, 500000, approval_wait=60))
                await asyncio.to_thread(self.awaiting, key)
                cancelled = time.monotonic()
                task.cancel()
                with self.assertRaises(asyncio.CancelledError):
                    await asyncio.wait_for(task, 5)
                return time.monotonic() - cancelled
        self.assertLess(self.run_async(main()), 1.0)
        self.assertEqual(self.operator.lookup(key).status, "awaiting_approval")
        self.assertEqual(self.provider.calls, 0)

    def test_a_cancel_event_ends_the_wait_with_the_outcome(self):
        key = new_key()

        async def main():
            async with opjournal.aio.Journal(server.grpc_addr, token=tokens["agent"], timeout=5) as j:
                cancel = asyncio.Event()
                task = asyncio.ensure_future(self.execute(j, key, 500000, approval_wait=60, cancel=cancel))
                await asyncio.to_thread(self.awaiting, key)
                cancelled = time.monotonic()
                cancel.set()
                out = await asyncio.wait_for(task, 5)
                return out, time.monotonic() - cancelled
        out, took = self.run_async(main())
        self.assertLess(took, 1.0)
        self.assertEqual((out.kind, out.operation.operation_key), ("awaiting_approval", key))
        self.assertIn("cancelled", out.message)
        self.assertEqual(self.provider.calls, 0)


if __name__ == "__main__":
    unittest.main()
