"""The Python snippets of clients/python/README.md run as written, against
the real journal and a counting provider (only the addresses are swapped)."""

import contextlib
import io
import re
import unittest

from _harness import PYROOT, Provider, Server


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
        ns = {"PROVIDER_URL": provider.url}
        for name in ("quickstart", "decorator"):
            code = snippet(name).replace("127.0.0.1:9090", server.grpc_addr)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(code, "README.md:" + name, "exec"), ns)
            if name == "quickstart":
                self.assertEqual(out.getvalue(), "succeeded {'payment_id': 'pay_1'}\n")
        self.assertEqual(ns["out"].kind, "succeeded")  # the decorator's
        # The quick start charged once; the decorator once, then replayed.
        self.assertEqual(provider.calls, 2)
        self.assertEqual(provider.keys, ["payment:order-817:intent-01", "payment:818:intent-01"])
        ns["journal"].close()

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

    def test_the_quick_start_is_short(self):
        lines = [ln for ln in snippet("quickstart").splitlines() if ln.strip()]
        self.assertLessEqual(len(lines), 11)


if __name__ == "__main__":
    unittest.main()
