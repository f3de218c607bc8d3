// Operation keys, made the same way by every SDK (the Go reference is
// opjournal.NewKey and opjournal.ChildKey, keys.go; the vectors are in the
// repository's protocol/testdata/keys.json).
//
// An operation key names one business intent. Orchestrator code (never the
// model) makes it ONCE, when the intent arises, and stores it with the
// intent: every retry sends that same key, so a retry never makes a new
// one. In production make it opaque and random (newKey), and put the
// business links (the order, the customer) in refs beside it, where they
// are searchable and fixed at registration. A side effect inside a handler
// (a payment's receipt email, a webhook) is an operation of its own whose
// key is derived from its parent's (childKey), so that a retried handler
// derives the same child key and the child is not sent twice.

import { createHash, randomBytes } from "node:crypto";

import { invalidArgument } from "./errors.js";
import { MAX_CHILD_NAME_LEN, MAX_KEY_LEN } from "./limits.js";

/** Starts every key newKey and childKey make. */
export const KEY_PREFIX = "op_";

/** Lowercase base32 (RFC 4648): 26 characters for 128 bits, safe in URLs and headers. */
const ALPHABET = "abcdefghijklmnopqrstuvwxyz234567";

/** Separates child-key hashes from every other use of SHA-256. */
const CHILD_KEY_DOMAIN = "opjournal child key v1";

const CHILD_NAME = /^[a-z0-9_.-]+$/;

/** Lowercase base32 (RFC 4648) without padding. */
function base32(bytes: Uint8Array): string {
  let out = "";
  let bits = 0;
  let value = 0;
  for (const b of bytes) {
    value = (value << 8) | b;
    bits += 8;
    while (bits >= 5) {
      out += ALPHABET[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
    value &= (1 << bits) - 1;
  }
  if (bits > 0) out += ALPHABET[(value << (5 - bits)) & 31];
  return out;
}

/**
 * A new opaque operation key: "op_" and 128 random bits in lowercase
 * base32 without padding (29 characters in all).
 *
 * Make it ONCE per business intent, in orchestrator code (never in the
 * model), and store it with the intent: every retry of the intent must send
 * the same key, so never call newKey for a retry. Put the business links
 * (order_id, customer) in `refs` beside the key (refs are fixed at
 * registration); a side effect of the operation gets a key derived from
 * this one with {@link childKey}.
 */
export function newKey(): string {
  return KEY_PREFIX + base32(randomBytes(16));
}

/**
 * The key of the side effect `name` of the operation `parent` (its receipt
 * email, an analytics event, a webhook).
 *
 * The same parent and name always give the same key, so a retried handler
 * registers the same child instead of a second one: the customer gets one
 * receipt however often the payment's handler runs. `name` is
 * 1–MAX_CHILD_NAME_LEN characters of [a-z0-9_.-] ("receipt_email");
 * `parent` is the parent's key (1–MAX_KEY_LEN bytes). Register the child
 * with `parentKey: parent` to find it again (listOperations({ parentKey }));
 * like refs, the parent is fixed at registration.
 *
 * The key is "op_" and the lowercase base32 (no padding) of the first 16
 * bytes of SHA-256 over the UTF-8 of "opjournal child key v1\0" +
 * len(parent) + ":" + parent + "\0" + len(name) + ":" + name, lengths in
 * bytes, in decimal: every SDK derives the same key.
 *
 * Throws an OpjournalError INVALID_ARGUMENT (field "parent_key" or "name")
 * for an invalid parent or name.
 */
export function childKey(parent: string, name: string): string {
  if (typeof parent !== "string") throw invalidArgument("parent_key", `must be a string; got ${typeof parent}`);
  if (/\p{Cs}/u.test(parent)) throw invalidArgument("parent_key", "is not well-formed Unicode (a lone surrogate)");
  const p = Buffer.from(parent, "utf8");
  if (p.length < 1 || p.length > MAX_KEY_LEN) throw invalidArgument("parent_key", `must be 1–${MAX_KEY_LEN} characters`);
  if (typeof name !== "string" || name.length < 1 || name.length > MAX_CHILD_NAME_LEN || !CHILD_NAME.test(name)) {
    throw invalidArgument("name", `must be 1–${MAX_CHILD_NAME_LEN} characters of a-z, 0-9, '_', '.' and '-'`);
  }
  // Length-prefixed, so that no other (parent, name) split of the same
  // bytes gives the same key.
  const h = createHash("sha256")
    .update(`${CHILD_KEY_DOMAIN}\0${p.length}:`, "utf8").update(p)
    .update(`\0${name.length}:${name}`, "utf8")
    .digest();
  return KEY_PREFIX + base32(h.subarray(0, 16));
}
