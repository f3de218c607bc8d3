"""docs/integrations/python-asyncio.md: its runnable example runs as written,
in a fresh interpreter, against the real journal and a counting provider
(only the addresses come from the environment, as the text says)."""

import os
import re
import subprocess
import sys
import unittest

from _harness import PYROOT, ROOT, Provider, Server

DOC = ROOT / "docs" / "integrations" / "python-asyncio.md"


def snippet(name):
    m = re.search(r"<!-- test: %s -->\n```python\n(.*?)```" % re.escape(name), DOC.read_text(), re.S)
    if m is None:
        raise AssertionError("%s has no snippet %r" % (DOC, name))
    return m.group(1)


class AsyncioDocTest(unittest.TestCase):
    def test_the_example_runs_charges_once_and_replays(self):
        server, provider = Server(), Provider()
        self.addCleanup(server.stop)
        self.addCleanup(provider.stop)
        code = snippet("asyncio")
        self.assertLessEqual(len([ln for ln in code.splitlines() if ln.strip()]), 25)  # short, as promised
        env = {**os.environ, "PYTHONPATH": str(PYROOT), "PROVIDER_URL": provider.url[:-len("/payments")],
               "OPJOURNAL_ADDR": server.grpc_addr}
        r = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "succeeded {'payment_id': 'pay_1'} True\n")
        self.assertEqual(r.stderr, "")
        self.assertEqual((provider.calls, provider.keys), (1, ["payment:819:intent-01"]))

    def test_the_lease_numbers_are_the_generated_limits(self):
        from opjournal import _limits as L
        text = " ".join(DOC.read_text().split())
        self.assertIn("a tenth of the lease, at least %g s and at most %g s" % (L.LEASE_MARGIN_MIN_SECONDS,
                                                                                L.LEASE_MARGIN_MAX_SECONDS), text)
        self.assertEqual(L.LEASE_MARGIN_DIVISOR, 10)
        self.assertEqual(L.HEARTBEAT_DIVISOR, 3)
        self.assertIn("`ExtendLease` is called every third of the lease", text)
        self.assertIn("**These framework examples were not run here.**", text)


if __name__ == "__main__":
    unittest.main()
