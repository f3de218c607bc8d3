"""new_key() and child_key() make keys exactly as every other SDK does: the
vectors of the repository's protocol/testdata/keys.json (no server needed)."""

import json
import re
import unittest

from _harness import ROOT

import opjournal
from opjournal import _limits

VECTORS = json.loads((ROOT / "protocol" / "testdata" / "keys.json").read_text())


class KeyVectorsTest(unittest.TestCase):
    def test_child_keys(self):
        self.assertGreater(len(VECTORS["child_keys"]), 0)
        for v in VECTORS["child_keys"]:
            with self.subTest(parent=v["parent"], name=v["name"]):
                self.assertEqual(opjournal.child_key(v["parent"], v["name"]), v["key"])
                # The same parent and name always give the same key.
                self.assertEqual(opjournal.child_key(v["parent"], v["name"]), v["key"])
                self.assertRegex(v["key"], VECTORS["new_key_pattern"])

    def test_invalid_child_names(self):
        self.assertGreater(len(VECTORS["invalid_child_names"]), 0)
        for name in VECTORS["invalid_child_names"]:
            with self.subTest(name=name):
                with self.assertRaises(opjournal.InvalidArgument) as cm:
                    opjournal.child_key("payment:order-817:intent-01", name)
                self.assertEqual(cm.exception.field, "name")
                self.assertEqual(cm.exception.code, "INVALID_ARGUMENT")

    def test_child_name_limits_are_the_generated_ones(self):
        parent = "payment:order-817:intent-01"
        longest = "x" * _limits.MAX_CHILD_NAME_LEN
        self.assertRegex(opjournal.child_key(parent, longest), VECTORS["new_key_pattern"])
        self.assertRegex(opjournal.child_key(parent, "a_b.c-9"), VECTORS["new_key_pattern"])
        with self.assertRaises(opjournal.InvalidArgument):
            opjournal.child_key(parent, longest + "x")
        for bad in (None, 7, b"receipt"):
            with self.subTest(name=bad), self.assertRaises(opjournal.InvalidArgument) as cm:
                opjournal.child_key(parent, bad)
            self.assertEqual(cm.exception.field, "name")

    def test_invalid_parents(self):
        for parent in ("", "p" * (_limits.MAX_KEY_LEN + 1), None, 42, "\udc80"):
            with self.subTest(parent=parent):
                with self.assertRaises(opjournal.InvalidArgument) as cm:
                    opjournal.child_key(parent, "receipt_email")
                self.assertEqual(cm.exception.field, "parent_key")
        # The longest parent is fine, and a child may have children.
        child = opjournal.child_key("p" * _limits.MAX_KEY_LEN, "receipt_email")
        self.assertNotEqual(opjournal.child_key(child, "receipt_email"), child)

    def test_new_key(self):
        keys = {opjournal.new_key() for _ in range(1000)}
        self.assertEqual(len(keys), 1000)
        for k in keys:
            self.assertRegex(k, VECTORS["new_key_pattern"])
            self.assertTrue(k.startswith(opjournal.KEY_PREFIX))
            self.assertEqual(len(k), len(opjournal.KEY_PREFIX) + 26)
        # Every base32 character turns up: the whole alphabet is in use.
        self.assertEqual(set("".join(k[3:] for k in keys)), set("abcdefghijklmnopqrstuvwxyz234567"))

    def test_the_pattern_is_anchored(self):
        self.assertIsNone(re.fullmatch(VECTORS["new_key_pattern"], opjournal.new_key() + "a"))
        self.assertIsNotNone(re.fullmatch(VECTORS["new_key_pattern"], opjournal.new_key()))


if __name__ == "__main__":
    unittest.main()
