"""The Python snippets of client/python/README.md run as written, against
the real journal and a counting provider (only the addresses are swapped)."""

import contextlib
import io
import os
import re
import unittest

from _harness import PYROOT, Provider, Server

import opjournal


def snippet(name):
    text = (PYROOT / "README.md").read_text()
    m = re.search(r"<!-- test: %s -->\n```python\n(.*?)```" % re.escape(name), text, re.S)
    if m is None:
        raise AssertionError("README.md has no snippet %r" % name)
    return m.group(1)


class ReadmeTest(unittest.TestCase):
    def test_snippets(self):
        server, provider = Server(), Provider()
        self.addCleanup(server.stop)
        self.addCleanup(provider.stop)
        # The quick start reads where the provider and the journal are from
        # the environment, as documented (scripts/fresh-clone.sh runs it
        # the same way against the real test provider).
        base = provider.url[:-len("/payments")]
        for name, value in (("PROVIDER_URL", base), ("OPJOURNAL_ADDR", server.grpc_addr)):
            old = os.environ.get(name)
            os.environ[name] = value
            self.addCleanup(lambda n=name, o=old: os.environ.pop(n) if o is None else os.environ.__setitem__(n, o))
        ns = {}
        for name in ("quickstart", "decorator", "children"):
            code = snippet(name)
            if name != "quickstart":
                code = code.replace('"127.0.0.1:9090"', repr(server.grpc_addr))
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(code, "README.md:" + name, "exec"), ns)
            if name == "quickstart":
                self.assertEqual(out.getvalue(), "succeeded {'payment_id': 'pay_1'}\n")
            if name == "decorator":
                self.addCleanup(ns["journal"].close)  # the children snippet's journal has the same name
            if name == "children":
                self.assertEqual(out.getvalue(), "(False, False) (True, True)\n")
        self.assertEqual(ns["out"].kind, "succeeded")  # the decorator's
        # The quick start charged once; the decorator once, then replayed;
        # the handler with the child email once, then replayed.
        payment_key = ns["payment_key"]
        email_key = opjournal.child_key(payment_key, "receipt_email")
        self.assertRegex(payment_key, r"^op_[a-z2-7]{26}$")
        self.assertEqual(provider.calls, 4)
        self.assertEqual(list(zip(provider.paths, provider.keys)), [
            ("/payments", "payment:order-901:intent-01"), ("/payments", "payment:818:intent-01"),
            ("/payments", payment_key), ("/emails", email_key)])
        self.assertEqual([op.operation_key for op in ns["children"]], [email_key])
        self.assertIn(payment_key, [op.operation_key for op in ns["orders"]])

    def test_the_quick_start_says_what_a_bug_in_fn_gives(self):
        # The regression of a NameError in the quick start: printed, not a bare kind.
        code = snippet("quickstart")
        self.assertIn('print(out.kind, out.result if out.ok else out.message)', code)
        self.assertIn('os.environ.get("PROVIDER_URL", "http://127.0.0.1:8099")', code)
        self.assertIn("go -C harness run ./cmd/opjournal-fakeprovider", (PYROOT / "README.md").read_text())

    def test_the_lease_numbers_are_the_generated_limits(self):
        from opjournal import _limits as L
        text = " ".join((PYROOT / "README.md").read_text().split())
        words = {3: "third", 10: "tenth"}
        self.assertIn("The margin is a %s of the lease, at least %g s and at most %g s"
                      % (words[L.LEASE_MARGIN_DIVISOR], L.LEASE_MARGIN_MIN_SECONDS, L.LEASE_MARGIN_MAX_SECONDS), text)
        self.assertIn("calls `ExtendLease` every %s of the lease (at least %g s apart"
                      % (words[L.HEARTBEAT_DIVISOR], L.HEARTBEAT_MIN_SECONDS), text)
        self.assertIn("fn may run at most lease − margin; long calls keep the lease alive by heartbeat; when the "
                      "lease cannot be kept the SDK gives up, the outcome is unknown, and the reconciler settles it",
                      text)

    def test_the_key_and_ref_numbers_are_the_generated_limits(self):
        from opjournal import _limits as L
        text = " ".join((PYROOT / "README.md").read_text().split())
        self.assertIn("at most %d (`MAX_REFS`" % L.MAX_REFS, text)
        self.assertIn("is 1–%d characters of `[a-z0-9_.-]` (`MAX_CHILD_NAME_LEN`)" % L.MAX_CHILD_NAME_LEN, text)

    def test_the_quick_start_is_short(self):
        lines = [ln for ln in snippet("quickstart").splitlines() if ln.strip()]
        self.assertLessEqual(len(lines), 13)


if __name__ == "__main__":
    unittest.main()
