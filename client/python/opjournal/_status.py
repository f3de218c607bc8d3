"""Decoding of the rich gRPC error status the journal sends.

A refused call carries, in the trailing metadata ``grpc-status-details-bin``,
a serialized ``google.rpc.Status`` whose ``details`` hold a
``google.rpc.ErrorInfo`` (domain ``"opjournal"``, reason = the error code,
metadata ``field`` = the offending request field).

Debian ships no Python code for the google.rpc protos, and registering our
own copy in the default descriptor pool would clash with
googleapis-common-protos wherever that is installed. So the three messages
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

    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)

    def cls(name):
        desc = pool.FindMessageTypeByName(name)
        get = getattr(message_factory, "GetMessageClass", None)  # protobuf >= 4.22
        if get is not None:
            return get(desc)
        return message_factory.MessageFactory(pool).GetPrototype(desc)

    return cls("google.rpc.Status"), cls("google.rpc.ErrorInfo")


_Status, _ErrorInfo = _build()

#: The trailing metadata key of the serialized google.rpc.Status.
DETAILS_KEY = "grpc-status-details-bin"
_ERROR_INFO = "google.rpc.ErrorInfo"


class ErrorInfo(NamedTuple):
    """The parts of a google.rpc.ErrorInfo the client uses."""

    reason: str
    domain: str
    metadata: Dict[str, str]


def encode_status(code: int, message: str, infos=()) -> bytes:
    """Serializes a google.rpc.Status holding the given ErrorInfos
    (reason, domain, metadata); for tests and fakes."""
    st = _Status(code=code, message=message)
    for reason, domain, metadata in infos:
        d = st.details.add()
        d.type_url = "type.googleapis.com/" + _ERROR_INFO
        d.value = _ErrorInfo(reason=reason, domain=domain, metadata=dict(metadata)).SerializeToString()
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


def details_from_metadata(metadata) -> Optional[bytes]:
    """The value of grpc-status-details-bin in gRPC (trailing) metadata."""
    for item in metadata or ():
        key, value = item[0], item[1]
        if key == DETAILS_KEY:
            return value if isinstance(value, bytes) else None
    return None
