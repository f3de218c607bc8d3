// newKey and childKey make keys exactly as every other SDK does: the
// vectors of the repository's protocol/testdata/keys.json (no server needed).

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { childKey, KEY_PREFIX, limits, newKey, OpjournalError } from "../src/index.js";
import { repoRoot } from "../testutil/harness.js";

interface KeyVectors {
  new_key_pattern: string;
  child_keys: Array<{ parent: string; name: string; key: string }>;
  invalid_child_names: string[];
}

const vectors = JSON.parse(readFileSync(join(repoRoot(), "protocol", "testdata", "keys.json"), "utf8")) as KeyVectors;
const pattern = new RegExp(vectors.new_key_pattern);

/** Runs f and returns the OpjournalError it throws. */
function thrown(f: () => unknown): OpjournalError {
  try {
    f();
  } catch (e) {
    assert.ok(e instanceof OpjournalError, `want an OpjournalError, got ${String(e)}`);
    return e;
  }
  assert.fail("no error thrown");
}

test("childKey gives every vector of protocol/testdata/keys.json", () => {
  assert.ok(vectors.child_keys.length > 0);
  for (const v of vectors.child_keys) {
    assert.equal(childKey(v.parent, v.name), v.key, `childKey(${JSON.stringify(v.parent)}, ${JSON.stringify(v.name)})`);
    assert.equal(childKey(v.parent, v.name), v.key, "the same parent and name always give the same key");
    assert.match(v.key, pattern);
  }
});

test("childKey refuses every invalid name of protocol/testdata/keys.json (field name)", () => {
  assert.ok(vectors.invalid_child_names.length > 0);
  for (const name of vectors.invalid_child_names) {
    const e = thrown(() => childKey("payment:order-817:intent-01", name));
    assert.equal(e.code, "INVALID_ARGUMENT", JSON.stringify(name));
    assert.equal(e.field, "name", JSON.stringify(name));
  }
  for (const name of [undefined, 7, null]) {
    assert.equal(thrown(() => childKey("p", name as unknown as string)).field, "name");
  }
});

test("childKey takes its limits from the generated limits", () => {
  const parent = "payment:order-817:intent-01";
  const longest = "x".repeat(limits.MAX_CHILD_NAME_LEN);
  assert.match(childKey(parent, longest), pattern);
  assert.match(childKey(parent, "a_b.c-9"), pattern);
  assert.equal(thrown(() => childKey(parent, longest + "x")).field, "name");
  assert.match(childKey("p".repeat(limits.MAX_KEY_LEN), "receipt_email"), pattern);
  // Lengths are in bytes: 100 two-byte characters are a 200-byte parent, 101 are too many.
  assert.match(childKey("ü".repeat(limits.MAX_KEY_LEN / 2), "receipt_email"), pattern);
  assert.equal(thrown(() => childKey("ü".repeat(limits.MAX_KEY_LEN / 2 + 1), "receipt_email")).field, "parent_key");
});

test("childKey refuses an invalid parent (field parent_key)", () => {
  for (const parent of ["", "p".repeat(limits.MAX_KEY_LEN + 1), "a\udc80", undefined, 42]) {
    const e = thrown(() => childKey(parent as unknown as string, "receipt_email"));
    assert.equal(e.code, "INVALID_ARGUMENT");
    assert.equal(e.field, "parent_key", JSON.stringify(parent));
  }
  // A child may have children of its own.
  const child = childKey("payment:order-817:intent-01", "receipt_email");
  assert.notEqual(childKey(child, "receipt_email"), child);
});

test("newKey: op_ and 26 characters of base32, new every time", () => {
  const keys = new Set<string>();
  for (let i = 0; i < 1000; i++) keys.add(newKey());
  assert.equal(keys.size, 1000);
  const seen = new Set<string>();
  for (const k of keys) {
    assert.match(k, pattern);
    assert.ok(k.startsWith(KEY_PREFIX));
    assert.equal(k.length, KEY_PREFIX.length + 26);
    for (const c of k.slice(KEY_PREFIX.length)) seen.add(c);
  }
  assert.equal([...seen].sort().join(""), "234567abcdefghijklmnopqrstuvwxyz", "the whole alphabet is in use");
});

test("the README's numbers for refs and child names are the generated limits", () => {
  const text = readFileSync(join(repoRoot(), "client", "typescript", "README.md"), "utf8").split(/\s+/).join(" ");
  assert.ok(text.includes(`at most ${limits.MAX_REFS} (\`limits.MAX_REFS\`)`), "MAX_REFS");
  assert.ok(text.includes(`is 1–${limits.MAX_CHILD_NAME_LEN} characters of \`[a-z0-9_.-]\` (\`limits.MAX_CHILD_NAME_LEN\`)`), "MAX_CHILD_NAME_LEN");
});
