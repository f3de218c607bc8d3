"""Decoding of the rich gRPC error status the journal sends.

A refused call carries, in the trailing metadata ``grpc-status-details-bin``,
a serialized ``google.rpc.Status`` whose ``details`` hold a
``google.rpc.ErrorInfo`` (domain ``"opjournal"``, reason = the error code,
metadata ``field`` = the offending request field, and facts for programs
such as a budget's name and limit), and, when the server knows when the
same request may succeed, a ``google.rpc.RetryInfo`` (``retry_delay``).

Debian ships no Python code for the google.rpc protos, and registering our
own copy in the default descriptor pool would clash with
googleapis-common-protos wherever that is installed. So the messages
are declared here, wire-compatible, in a private descriptor pool, and
decoded by the protobuf runtime like any other message.
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Optional

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto


def _field(msg, name, number, ftype, label=_F.LABEL_OPTIONAL, type_name=""):
    f = msg.field.add(name=name, number=number, type=ftype, label=label)
    if type_name:
        f.type_name = type_name


def _build():
    fdp = descriptor_pb2.FileDescriptorProto(
        name="opjournal/_private/google_rpc_status.proto",
        package="google.rpc",
        syntax="proto3",
    )
    # google.protobuf.Any, under another name: only its wire form matters.
    anyish = fdp.message_type.add(name="AnyValue")
    _field(anyish, "type_url", 1, _F.TYPE_STRING)
    _field(anyish, "value", 2, _F.TYPE_BYTES)

    status = fdp.message_type.add(name="Status")
    _field(status, "code", 1, _F.TYPE_INT32)
    _field(status, "message", 2, _F.TYPE_STRING)
    _field(status, "details", 3, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".google.rpc.AnyValue")

    info = fdp.message_type.add(name="ErrorInfo")
    _field(info, "reason", 1, _F.TYPE_STRING)
    _field(info, "domain", 2, _F.TYPE_STRING)
    _field(info, "metadata", 3, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".google.rpc.ErrorInfo.MetadataEntry")
    entry = info.nested_type.add(name="MetadataEntry")
    entry.options.map_entry = True
    _field(entry, "key", 1, _F.TYPE_STRING)
    _field(entry, "value", 2, _F.TYPE_STRING)

    # google.protobuf.Duration, under another name, like AnyValue.
    duration = fdp.message_type.add(name="DurationValue")
    _field(duration, "seconds", 1, _F.TYPE_INT64)
    _field(duration, "nanos", 2, _F.TYPE_INT32)

    retry = fdp.message_type.add(name="RetryInfo")
    _field(retry, "retry_delay", 1, _F.TYPE_MESSAGE, type_name=".google.rpc.DurationValue")

    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)

    def cls(name):
        desc = pool.FindMessageTypeByName(name)
        get = getattr(message_factory, "GetMessageClass", None)  # protobuf >= 4.22
        if get is not None:
            return get(desc)
        return message_factory.MessageFactory(pool).GetPrototype(desc)

    return cls("google.rpc.Status"), cls("google.rpc.ErrorInfo"), cls("google.rpc.RetryInfo")


_Status, _ErrorInfo, _RetryInfo = _build()

#: The trailing metadata key of the serialized google.rpc.Status.
DETAILS_KEY = "grpc-status-details-bin"
_ERROR_INFO = "google.rpc.ErrorInfo"
_RETRY_INFO = "google.rpc.RetryInfo"


class ErrorInfo(NamedTuple):
    """The parts of a google.rpc.ErrorInfo the client uses."""

    reason: str
    domain: str
    metadata: Dict[str, str]


def encode_status(code: int, message: str, infos=(), retry_delay: Optional[float] = None) -> bytes:
    """Serializes a google.rpc.Status holding the given ErrorInfos
    (reason, domain, metadata), and a RetryInfo when ``retry_delay``
    (seconds) is given; for tests and fakes."""
    st = _Status(code=code, message=message)
    for reason, domain, metadata in infos:
        d = st.details.add()
        d.type_url = "type.googleapis.com/" + _ERROR_INFO
        d.value = _ErrorInfo(reason=reason, domain=domain, metadata=dict(metadata)).SerializeToString()
    if retry_delay is not None:
        seconds = int(retry_delay)
        ri = _RetryInfo()
        ri.retry_delay.seconds = seconds
        ri.retry_delay.nanos = int(round((retry_delay - seconds) * 1e9))
        d = st.details.add()
        d.type_url = "type.googleapis.com/" + _RETRY_INFO
        d.value = ri.SerializeToString()
    return st.SerializeToString()


def error_info(status_bytes: Optional[bytes], domain: str = "opjournal") -> Optional[ErrorInfo]:
    """Returns the first ErrorInfo of the given domain in a serialized
    google.rpc.Status, or None (no details, another domain, or bytes that do
    not parse: a malformed detail never hides the call's real status)."""
    if not status_bytes:
        return None
    try:
        st = _Status.FromString(bytes(status_bytes))
        for d in st.details:
            # "type.googleapis.com/google.rpc.ErrorInfo"; only the part after
            # the last "/" names the type.
            if d.type_url.rsplit("/", 1)[-1] != _ERROR_INFO:
                continue
            info = _ErrorInfo.FromString(d.value)
            if info.domain == domain:
                return ErrorInfo(info.reason, info.domain, dict(info.metadata))
    except Exception:  # DecodeError, or anything a hostile peer could cause
        return None
    return None


def retry_delay(status_bytes: Optional[bytes]) -> Optional[float]:
    """Returns the retry_delay, in seconds, of the first RetryInfo in a
    serialized google.rpc.Status, or None (no RetryInfo, a negative delay,
    or bytes that do not parse: a malformed detail is no hint)."""
    if not status_bytes:
        return None
    try:
        st = _Status.FromString(bytes(status_bytes))
        for d in st.details:
            if d.type_url.rsplit("/", 1)[-1] != _RETRY_INFO:
                continue
            ri = _RetryInfo.FromString(d.value)
            if not ri.HasField("retry_delay"):
                return None
            delay = ri.retry_delay.seconds + ri.retry_delay.nanos / 1e9
            return float(delay) if delay >= 0 else None
    except Exception:  # DecodeError, or anything a hostile peer could cause
        return None
    return None


def details_from_metadata(metadata) -> Optional[bytes]:
    """The value of grpc-status-details-bin in gRPC (trailing) metadata."""
    for item in metadata or ():
        key, value = item[0], item[1]
        if key == DETAILS_KEY:
            return value if isinstance(value, bytes) else None
    return None
