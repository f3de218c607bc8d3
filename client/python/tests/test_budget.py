"""Budgets through execute, against the real opjournal binary with a policy
whose create_payment has two budgets that reject (a count and a sum, per
agent): an agent pays until a budget refuses, and the refusal is an
Outcome of kind "budget_exceeded" that names the budget, with a retry hint
when the request fits later and none when it alone is over the limit. The
provider counts every call: a refused payment never reaches it."""

import asyncio
import unittest
import uuid

from _harness import Provider, Server, new_key, policy_file

import opjournal
import opjournal.aio
from opjournal import OutcomeKind

#: The test policy's budgets: at most COUNT payments and SPEND minor units
#: (per currency) per agent within WINDOW seconds; both reject. Each test
#: pays as an agent of its own (payload.agent), so the tests share the
#: server but not a counter.
COUNT = 2
SPEND = 500000
WINDOW = 3600

POLICY = """\
actions:
  create_payment:
    operation_key: required
    lease_seconds: 30
    integer_fields: [amount_minor]
    budgets:
      - name: hourly-payments
        count: true
        per: [agent]
        window: 1h
        limit: {count}
        on_exceed: reject
      - name: hourly-spend
        sum: amount_minor
        per: [agent, currency]
        window: 1h
        limit: {spend}
        on_exceed: reject
""".format(count=COUNT, spend=SPEND)

server = None


def setUpModule():
    global server
    server = Server("--policy", policy_file(POLICY))


def tearDownModule():
    server.stop()


def new_agent():
    return "agent-" + uuid.uuid4().hex[:12]


def payment(agent, order, amount=1000):
    return {"agent": agent, "order_id": str(order), "amount_minor": amount, "currency": "EUR"}


class Checks:
    """The assertions the blocking and the asyncio tests share."""

    def assert_refused_by_count(self, out, used=COUNT):
        """out is the refusal of hourly-payments with every payment of the
        window used, and a hint: the oldest payment leaves the window about
        WINDOW seconds after it was registered."""
        self.assertIs(out.kind, OutcomeKind.BUDGET_EXCEEDED)
        self.assertEqual(out.kind, "budget_exceeded")
        b = out.budget
        self.assertIsInstance(b, opjournal.BudgetRefusal)
        self.assertEqual((b.name, b.action, b.limit, b.used, b.window_seconds),
                         ("hourly-payments", "create_payment", COUNT, used, WINDOW))
        self.assertIn('budget "hourly-payments" of create_payment', b.message)
        # The journal rounds its hint up to the next whole second.
        self.assertIsNotNone(out.retry_after)
        self.assertGreater(out.retry_after, WINDOW - 60)
        self.assertLessEqual(out.retry_after, WINDOW + 1)
        self.assertIsInstance(out.cause, opjournal.BudgetExceeded)
        self.assertEqual(out.cause.retry_after, out.retry_after)
        self.assertEqual(out.cause.details["retry_after_seconds"], "%d" % out.retry_after)
        self.assertIn("BUDGET_EXCEEDED", out.message)
        self.assertIsNone(out.operation)  # nothing was registered
        self.assertFalse(out.ok)
        with self.assertRaises(opjournal.NotSucceeded) as cm:
            out.check()
        self.assertIn("nothing was registered or called", str(cm.exception))
        self.assertIn("may fit in %gs" % out.retry_after, str(cm.exception))

    def assert_alone_over_the_limit(self, out):
        """out is the refusal of hourly-spend for an amount over its limit:
        no hint, since waiting never makes it fit."""
        self.assertIs(out.kind, OutcomeKind.BUDGET_EXCEEDED)
        b = out.budget
        self.assertEqual((b.name, b.action, b.limit, b.used, b.window_seconds),
                         ("hourly-spend", "create_payment", SPEND, 0, WINDOW))
        self.assertIsNone(out.retry_after)
        self.assertIsNone(out.cause.retry_after)
        self.assertNotIn("retry_after_seconds", out.cause.details)
        self.assertIn("alone is over its limit", b.message)
        self.assertIsNone(out.operation)
        with self.assertRaises(opjournal.NotSucceeded) as cm:
            out.check()
        self.assertIn("it never fits this budget", str(cm.exception))


class BudgetTest(Checks, unittest.TestCase):
    def setUp(self):
        self.provider = Provider()
        self.addCleanup(self.provider.stop)
        self.journal = server.journal()
        self.addCleanup(self.journal.close)
        self.fn_calls = []

    def pay(self, payload):
        def fn(key, attempt):
            self.fn_calls.append(key)
            return self.provider.pay(key, payload)
        return fn

    def execute(self, key, payload):
        return opjournal.execute(self.journal, key, "create_payment", payload, self.pay(payload))

    def test_an_agent_pays_until_the_budget_refuses(self):
        agent = new_agent()
        outcomes, keys = [], []
        for order in range(COUNT + 2):
            keys.append(new_key())
            outcomes.append(self.execute(keys[-1], payment(agent, order)))
        self.assertEqual([o.kind for o in outcomes], ["succeeded"] * COUNT + ["budget_exceeded"] * 2)
        # The provider saw the payments that fit, and nothing else.
        self.assertEqual((self.provider.calls, self.provider.keys), (COUNT, keys[:COUNT]))
        self.assertEqual(self.fn_calls, keys[:COUNT])
        for out in outcomes[COUNT:]:
            self.assert_refused_by_count(out)
        for key in keys[COUNT:]:
            with self.assertRaises(opjournal.NotFound):
                self.journal.lookup(key)
        # A replay of a payment that fit reserves nothing and is no refusal;
        # a retry of a refused one is refused again, still without a call.
        again = self.execute(keys[0], payment(agent, 0))
        self.assertEqual((again.kind, again.replayed), (OutcomeKind.SUCCEEDED, True))
        self.assert_refused_by_count(self.execute(keys[-1], payment(agent, COUNT + 1)))
        self.assertEqual(self.provider.calls, COUNT)
        # Another agent has a budget of its own.
        self.assertEqual(self.execute(new_key(), payment(new_agent(), 0)).kind, "succeeded")
        self.assertEqual(self.provider.calls, COUNT + 1)

    def test_an_amount_alone_over_the_limit_is_refused_without_a_hint(self):
        agent = new_agent()
        key = new_key()
        out = self.execute(key, payment(agent, 1, SPEND + 1))
        self.assert_alone_over_the_limit(out)
        self.assertEqual((self.provider.calls, self.fn_calls), (0, []))
        with self.assertRaises(opjournal.NotFound):
            self.journal.lookup(key)
        # Nothing was reserved: the agent's budget is whole.
        self.assertEqual(self.execute(new_key(), payment(agent, 2, SPEND)).kind, "succeeded")
        self.assertEqual(self.provider.calls, 1)

    def test_a_sum_refuses_what_would_pass_it_with_a_hint(self):
        agent = new_agent()
        self.assertEqual(self.execute(new_key(), payment(agent, 1, SPEND - 100)).kind, "succeeded")
        out = self.execute(new_key(), payment(agent, 2, 101))
        self.assertIs(out.kind, OutcomeKind.BUDGET_EXCEEDED)
        self.assertEqual((out.budget.name, out.budget.used, out.budget.limit), ("hourly-spend", SPEND - 100, SPEND))
        self.assertGreater(out.retry_after, WINDOW - 60)
        self.assertEqual(self.provider.calls, 1)
        # What still fits, fits.
        self.assertEqual(self.execute(new_key(), payment(agent, 3, 100)).kind, "succeeded")
        self.assertEqual(self.provider.calls, 2)

    def test_the_thin_register_raises_budget_exceeded(self):
        agent = new_agent()
        for order in range(COUNT):
            self.assertTrue(self.journal.register(new_key(), "create_payment", payment(agent, order)).created)
        with self.assertRaises(opjournal.BudgetExceeded) as cm:
            self.journal.register(new_key(), "create_payment", payment(agent, COUNT))
        e = cm.exception
        self.assertEqual(e.code, "BUDGET_EXCEEDED")
        self.assertIsNone(e.field)
        self.assertEqual(e.refusal, opjournal.BudgetRefusal("hourly-payments", "create_payment", COUNT, COUNT,
                                                            WINDOW, e.message))
        self.assertEqual(e.details, {"budget": "hourly-payments", "action": "create_payment", "limit": str(COUNT),
                                     "used": str(COUNT), "window_seconds": str(WINDOW),
                                     "retry_after_seconds": "%d" % e.retry_after})
        self.assertEqual(self.provider.calls, 0)


class AioBudgetTest(Checks, unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.provider = Provider()
        self.addCleanup(self.provider.stop)
        self.journal = opjournal.aio.Journal(server.grpc_addr, timeout=5.0, worker_id="py-aio-test")
        await self.journal.__aenter__()
        self.fn_calls = []

    async def asyncTearDown(self):
        await self.journal.close()

    async def execute(self, key, payload):
        async def fn(key, attempt):
            self.fn_calls.append(key)
            # The test provider's client is blocking: off the event loop.
            return await asyncio.to_thread(self.provider.pay, key, payload)
        return await opjournal.aio.execute(self.journal, key, "create_payment", payload, fn)

    async def test_an_agent_pays_until_the_budget_refuses(self):
        agent = new_agent()
        outcomes, keys = [], []
        for order in range(COUNT + 1):
            keys.append(new_key())
            outcomes.append(await self.execute(keys[-1], payment(agent, order)))
        self.assertEqual([o.kind for o in outcomes], ["succeeded"] * COUNT + ["budget_exceeded"])
        self.assert_refused_by_count(outcomes[-1])
        self.assertEqual((self.provider.calls, self.provider.keys), (COUNT, keys[:COUNT]))
        self.assertEqual(self.fn_calls, keys[:COUNT])
        with self.assertRaises(opjournal.NotFound):
            await self.journal.lookup(keys[-1])

    async def test_an_amount_alone_over_the_limit_is_refused_without_a_hint(self):
        out = await self.execute(new_key(), payment(new_agent(), 1, SPEND + 1))
        self.assert_alone_over_the_limit(out)
        self.assertEqual((self.provider.calls, self.fn_calls), (0, []))

    async def test_the_thin_register_raises_budget_exceeded(self):
        with self.assertRaises(opjournal.BudgetExceeded) as cm:
            await self.journal.register(new_key(), "create_payment", payment(new_agent(), 1, SPEND + 1))
        self.assertEqual(cm.exception.refusal.name, "hourly-spend")
        self.assertIsNone(cm.exception.retry_after)


if __name__ == "__main__":
    unittest.main()
