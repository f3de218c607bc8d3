"""JSON objects <-> google.protobuf.Struct, and Operation records."""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, Dict, Optional

from google.protobuf import struct_pb2

from .errors import InvalidArgument

#: 2^53-1, the largest integer every JSON library carries exactly; the
#: journal refuses numbers beyond +-MAX_SAFE_INTEGER.
MAX_SAFE_INTEGER = (1 << 53) - 1


def to_struct(field: str, obj: Any) -> struct_pb2.Struct:
    """Encodes a JSON object (a Mapping with str keys, or a dataclass
    instance) as a Struct. Raises InvalidArgument naming the path
    ("payload/items/0/amount_minor") of anything JSON cannot carry exactly:
    non-str keys, NaN/inf, integers beyond +-(2^53-1), bytes, sets,
    datetimes... (a number is never rounded on the way)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = dataclasses.asdict(obj)
    if not isinstance(obj, Mapping):
        raise InvalidArgument(None, "must be a JSON object (a dict); got %s" % type(obj).__name__, field)
    st = struct_pb2.Struct()
    _fill_struct(field, obj, st)
    return st


def _fill_struct(path: str, obj: Mapping, st: struct_pb2.Struct) -> None:
    for k, v in obj.items():
        if not isinstance(k, str):
            raise InvalidArgument(None, "has a key %r of type %s; JSON object keys are strings" % (k, type(k).__name__), path)
        _fill_value(path + "/" + k, v, st.fields[k])


def _fill_value(path: str, v: Any, out: struct_pb2.Value) -> None:
    if v is None:
        out.null_value = struct_pb2.NULL_VALUE
    elif isinstance(v, bool):
        out.bool_value = v
    elif isinstance(v, numbers.Integral):
        i = int(v)
        if not -MAX_SAFE_INTEGER <= i <= MAX_SAFE_INTEGER:
            raise InvalidArgument(None, "%d is beyond +-(2^53-1) and would be rounded; send it as a string" % i, path)
        out.number_value = i
    elif isinstance(v, numbers.Real):
        f = float(v)
        if not math.isfinite(f):
            raise InvalidArgument(None, "%r is not a finite number; JSON cannot carry it" % f, path)
        if not -MAX_SAFE_INTEGER <= f <= MAX_SAFE_INTEGER:
            raise InvalidArgument(None, "%r is beyond +-(2^53-1) and would be rounded; send it as a string" % f, path)
        out.number_value = f
    elif isinstance(v, str):
        out.string_value = v
    elif isinstance(v, Mapping):
        out.struct_value.Clear()
        _fill_struct(path, v, out.struct_value)
    elif isinstance(v, (list, tuple)):
        out.list_value.Clear()
        for i, e in enumerate(v):
            _fill_value("%s/%d" % (path, i), e, out.list_value.values.add())
    elif dataclasses.is_dataclass(v) and not isinstance(v, type):
        _fill_value(path, dataclasses.asdict(v), out)
    else:
        raise InvalidArgument(None, "is a %s, which JSON cannot carry (use str, int, float, bool, None, "
                              "dict or list)" % type(v).__name__, path)


def from_struct(st: struct_pb2.Struct) -> Dict[str, Any]:
    """Decodes a Struct as a dict. Numbers that are whole (and within
    +-(2^53-1)) come back as int: JSON does not tell 490000 from 490000.0,
    and neither does the journal's request hash. Members come as the
    journal stores them (protocol/canonjson): sorted, and without the
    null-valued ones (a null member means "not set"), so that a result
    reads the same on its first answer and on every replay."""
    return {k: from_value(st.fields[k]) for k in sorted(st.fields)
            if st.fields[k].WhichOneof("kind") not in (None, "null_value")}


def from_value(v: struct_pb2.Value) -> Any:
    kind = v.WhichOneof("kind")
    if kind == "number_value":
        n = v.number_value
        if n.is_integer() and -MAX_SAFE_INTEGER <= n <= MAX_SAFE_INTEGER:
            return int(n)
        return n
    if kind == "string_value":
        return v.string_value
    if kind == "bool_value":
        return v.bool_value
    if kind == "struct_value":
        return from_struct(v.struct_value)
    if kind == "list_value":
        return [from_value(e) for e in v.list_value.values]
    return None  # null_value, or unset


def to_refs(refs: Any) -> Dict[str, str]:
    """Checks the types of business references (a Mapping of str names to
    str values, or None for none) and returns them as a dict. Raises
    InvalidArgument ("refs", or "refs/<name>" for a value; never quoting a
    value) for what the wire cannot carry as given: a non-str name or value,
    a lone surrogate. The rest (how many, which names, how long) is the
    journal's to judge."""
    if refs is None:
        return {}
    if not isinstance(refs, Mapping):
        raise InvalidArgument(None, "must be a mapping of str names to str values; got %s" % type(refs).__name__,
                              "refs")
    out: Dict[str, str] = {}
    for k, v in refs.items():
        if not isinstance(k, str) or not _utf8(k):
            raise InvalidArgument(None, "has a name that is not a str of valid Unicode (%s)" % type(k).__name__,
                                  "refs")
        if not isinstance(v, str):
            raise InvalidArgument(None, "is a %s; ref values are str" % type(v).__name__, "refs/" + k)
        if not _utf8(v):
            raise InvalidArgument(None, "is not valid Unicode (a lone surrogate)", "refs/" + k)
        out[k] = v
    return out


def to_key(field: str, key: Any) -> str:
    """Checks that an optional key-valued field (parent_key) is a str ("" or
    None for none); the journal judges its content."""
    if key is None:
        return ""
    if not isinstance(key, str):
        raise InvalidArgument(None, "must be a str; got %s" % type(key).__name__, field)
    return key


def _utf8(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def timestamp(msg, name: str) -> Optional[datetime]:
    """A Timestamp field as an aware UTC datetime, or None when unset."""
    if not msg.HasField(name):
        return None
    ts = getattr(msg, name)
    return datetime.fromtimestamp(ts.seconds, tz=timezone.utc).replace(microsecond=ts.nanos // 1000)


def struct_or_none(msg, name: str) -> Optional[Dict[str, Any]]:
    if not msg.HasField(name):
        return None
    return from_struct(getattr(msg, name))
