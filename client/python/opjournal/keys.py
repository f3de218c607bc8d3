"""Operation keys, made the same way by every SDK (the Go reference is
opjournal.NewKey and opjournal.ChildKey, keys.go; the vectors are in the
repository's protocol/testdata/keys.json).

An operation key names one business intent. Orchestrator code (never the
model) makes it ONCE, when the intent arises, and stores it with the
intent: every retry sends that same key, so a retry never makes a new one.
In production make it opaque and random (:func:`new_key`), and put the
business links (the order, the customer) in ``refs`` beside it, where they
are searchable and fixed at registration. A side effect inside a handler (a
payment's receipt email, a webhook) is an operation of its own whose key is
derived from its parent's (:func:`child_key`), so that a retried handler
derives the same child key and the child is not sent twice.
"""

from __future__ import annotations

import base64
import hashlib
import os

from ._limits import MAX_CHILD_NAME_LEN, MAX_KEY_LEN
from .errors import InvalidArgument

__all__ = ["KEY_PREFIX", "new_key", "child_key"]

#: Starts every key new_key() and child_key() make.
KEY_PREFIX = "op_"

#: Separates child-key hashes from every other use of SHA-256.
_CHILD_KEY_DOMAIN = b"opjournal child key v1"

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_.-")


def _encode(b: bytes) -> str:
    """Lowercase base32 (RFC 4648) without padding."""
    return base64.b32encode(b).decode("ascii").rstrip("=").lower()


def new_key() -> str:
    """A new opaque operation key: "op_" and 128 random bits in lowercase
    base32 without padding (29 characters in all).

    Make it ONCE per business intent, in orchestrator code (never in the
    model), and store it with the intent: every retry of the intent must
    send the same key, so never call new_key() for a retry. Put the
    business links (order_id, customer) in ``refs`` beside the key (refs
    are fixed at registration); a side effect of the operation gets a key
    derived from this one with :func:`child_key`."""
    return KEY_PREFIX + _encode(os.urandom(16))


def child_key(parent: str, name: str) -> str:
    """The key of the side effect ``name`` of the operation ``parent`` (its
    receipt email, an analytics event, a webhook).

    The same parent and name always give the same key, so a retried
    handler registers the same child instead of a second one: the customer
    gets one receipt however often the payment's handler runs. ``name`` is
    1–MAX_CHILD_NAME_LEN characters of [a-z0-9_.-] ("receipt_email");
    ``parent`` is the parent's key (1–MAX_KEY_LEN bytes). Register the child
    with ``parent_key=parent`` to find it again (list_operations(
    parent_key=...)); like refs, the parent is fixed at registration.

    The key is "op_" and the lowercase base32 (no padding) of the first 16
    bytes of SHA-256 over the UTF-8 of "opjournal child key v1\\0" +
    len(parent) + ":" + parent + "\\0" + len(name) + ":" + name, lengths in
    bytes, in decimal: every SDK derives the same key.

    Raises InvalidArgument (field "parent_key" or "name") for an invalid
    parent or name."""
    if not isinstance(parent, str):
        raise InvalidArgument(None, "must be a str; got %s" % type(parent).__name__, "parent_key")
    try:
        p = parent.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(None, "is not valid Unicode (a lone surrogate)", "parent_key") from None
    if not 1 <= len(p) <= MAX_KEY_LEN:
        raise InvalidArgument(None, "must be 1–%d characters" % MAX_KEY_LEN, "parent_key")
    if (not isinstance(name, str) or not 1 <= len(name) <= MAX_CHILD_NAME_LEN
            or not all(c in _NAME_CHARS for c in name)):
        raise InvalidArgument(None, "must be 1–%d characters of a-z, 0-9, '_', '.' and '-'" % MAX_CHILD_NAME_LEN,
                              "name")
    n = name.encode("ascii")
    # Length-prefixed, so that no other (parent, name) split of the same
    # bytes gives the same key.
    h = hashlib.sha256(b"%s\0%d:%s\0%d:%s" % (_CHILD_KEY_DOMAIN, len(p), p, len(n), n))
    return KEY_PREFIX + _encode(h.digest()[:16])
