"""The wire codec of the rcvgp oracle protocol v1: messages <-> lists of frames, no sockets.

A message is a list of ZeroMQ frames: frame 0 is a UTF-8 JSON object (the header), frames
1..k are raw array buffers described, in order, by ``header["arrays"]`` (name, dtype with an
explicit byte order, shape, nbytes). Nothing is ever pickled. The normative text is
``protocols/v1.md``; this module is its executable form, kept pure (bytes in, bytes out) so it
can be tested without a socket and reused by the server, the client and the conformance kit.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rcvgp.errors import WireError

__all__ = [
    "PROTOCOL",
    "PROTOCOL_VERSION",
    "VERSION",
    "OPERATIONS",
    "ERROR_CODES",
    "ARRAY_DTYPES",
    "MAX_HEADER_BYTES",
    "WireError",
    "Message",
    "parse_version",
    "version_mismatch_message",
    "encode",
    "decode",
    "decode_header",
    "make_request",
    "make_reply",
    "make_error",
    "request_digest",
    "sanitize",
]

#: The protocol's name, carried by every header.
PROTOCOL = "rcvgp-oracle"
#: (major, minor) of the protocol this module speaks; independent of the package version.
PROTOCOL_VERSION = (1, 1)
#: The same as the ``"v"`` header string.
VERSION = f"{PROTOCOL_VERSION[0]}.{PROTOCOL_VERSION[1]}"
#: The operations of v1.
OPERATIONS = ("hello", "describe", "measure", "ping", "status")
#: Stable error codes and their default ``retryable`` flag.
ERROR_CODES: dict[str, bool] = {
    "BAD_REQUEST": False,
    "UNSUPPORTED_VERSION": False,
    "UNKNOWN_OPERATION": False,
    "OUT_OF_LIMITS": False,
    "TOO_LARGE": False,
    "BUSY": True,
    "RIG_FAULT": False,
    "INTERNAL": False,
    # Added in 1.1; a 1.0 client treats them as it treats any final error.
    "RIG_TIMEOUT": False,
    "EXPIRED": False,
}
#: dtypes a v1 server accepts for set points (explicit byte order); replies always use '<f8'.
ARRAY_DTYPES = ("<f8", ">f8", "<f4", ">f4")
#: Largest header frame a peer must accept.
MAX_HEADER_BYTES = 65536
#: Deepest nesting of JSON objects and lists a header may have.
MAX_HEADER_DEPTH = 32
#: Largest array dimension (JSON's exact-integer range).
MAX_DIMENSION = 2**53 - 1
_MAX_ID = 128
# "MAJOR", "MAJOR.MINOR" or "MAJOR.MINOR.PATCH", ASCII digits only (str.isdigit accepts "²" and "١").
_VERSION = re.compile(r"[0-9]{1,9}(?:\.[0-9]{1,9}){0,2}")


@dataclass
class Message:
    """A decoded message: the header (a JSON object) and its arrays, by name, in frame order."""

    header: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def op(self) -> str:
        return str(self.header.get("op", ""))

    @property
    def id(self) -> str:
        return str(self.header.get("id", ""))


def parse_version(v: Any) -> tuple[int, int]:
    """``"1.0"`` -> ``(1, 0)``; raises :class:`WireError` (BAD_REQUEST) for anything else.

    Accepted: ``MAJOR``, ``MAJOR.MINOR`` or ``MAJOR.MINOR.PATCH``, each part 1 to 9 ASCII digits
    (a patch part is ignored). Senders write ``"MAJOR.MINOR"``.
    """
    if isinstance(v, str) and _VERSION.fullmatch(v):
        parts = v.split(".")
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
    raise WireError("BAD_REQUEST", f'header field "v" must be a version string like "{VERSION}" (ASCII digits), got {shown}')


def version_mismatch_message(peer: tuple[int, int], ours: tuple[int, int] = PROTOCOL_VERSION, *, we_are: str = "server") -> str:
    """Say who must upgrade when two majors differ."""
    other = "client" if we_are == "server" else "server"
    older = other if peer[0] < ours[0] else we_are
    return (
        f"protocol major version mismatch: {other} speaks {PROTOCOL} {peer[0]}.{peer[1]}, "
        f"{we_are} speaks {ours[0]}.{ours[1]}; upgrade the {older} "
        f"(a {we_are} of major {ours[0]} cannot talk to a {other} of major {peer[0]})"
    )


def sanitize(value: Any) -> Any:
    """Make a value strict-JSON and UTF-8 safe.

    Non-finite floats become the strings ``"nan"``, ``"inf"``, ``"-inf"``; numpy scalars become
    plain numbers; a lone UTF-16 surrogate in a string (which UTF-8 cannot encode) becomes U+FFFD.
    """
    if isinstance(value, dict):
        return {_utf8_safe(str(k)): sanitize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [sanitize(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        return f if math.isfinite(f) else repr(f)
    if isinstance(value, str):
        return _utf8_safe(value)
    if value is None:
        return value
    return _utf8_safe(str(value))


def _utf8_safe(text: str) -> str:
    if not _has_surrogate(text):
        return text
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False, ensure_ascii=False).encode("utf-8")


def _array_frame(name: str, arr: np.ndarray) -> tuple[dict[str, Any], bytes | memoryview]:
    a = np.asarray(arr)
    if a.dtype.kind not in "fiu" or a.dtype.hasobject:
        raise WireError("BAD_REQUEST", f"array {name!r}: dtype {a.dtype} cannot travel; use '<f8'")
    if a.dtype.byteorder == "=" or (a.dtype.byteorder == "|" and a.dtype.itemsize > 1):
        a = a.astype(a.dtype.newbyteorder("<" if sys.byteorder == "little" else ">"), copy=False)
    a = np.ascontiguousarray(a)
    desc = {"name": name, "dtype": a.dtype.str, "shape": list(a.shape), "nbytes": int(a.nbytes)}
    return desc, memoryview(a).cast("B") if a.nbytes else b""


def encode(header: Mapping[str, Any], arrays: Mapping[str, np.ndarray] | None = None) -> list[bytes | memoryview]:
    """Frames of one message: the header (``"arrays"`` filled in from ``arrays``) then the buffers.

    Arrays are sent C-contiguous with an explicit byte order in their dtype (``'<f8'``); the
    buffers are not copied when they already are.
    """
    h = dict(header)
    frames: list[bytes | memoryview] = []
    descs = []
    for name, arr in (arrays or {}).items():
        desc, buf = _array_frame(name, arr)
        descs.append(desc)
        frames.append(buf)
    h["arrays"] = descs
    return [_dumps(sanitize(h)), *frames]


def decode_header(frame: bytes | memoryview) -> dict[str, Any]:
    """Parse frame 0.

    Raises
    ------
    WireError
        TOO_LARGE for a frame over :data:`MAX_HEADER_BYTES` (details ``header_bytes``,
        ``max_header_bytes``); BAD_REQUEST when it is not a UTF-8 JSON object, nests deeper than
        :data:`MAX_HEADER_DEPTH`, or holds a string with a lone UTF-16 surrogate (``"\\ud800"``:
        valid JSON syntax, but not Unicode text, and it could not be echoed in UTF-8).
    """
    raw = bytes(frame)
    if len(raw) > MAX_HEADER_BYTES:
        raise WireError("TOO_LARGE", f"header frame is {len(raw)} bytes, the limit is {MAX_HEADER_BYTES}",
                        {"header_bytes": len(raw), "max_header_bytes": MAX_HEADER_BYTES})
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WireError("BAD_REQUEST", f"frame 0 (the header) is not valid UTF-8: {exc}") from None
    if text.count("[") + text.count("{") > MAX_HEADER_DEPTH and _nesting(text) > MAX_HEADER_DEPTH:
        raise WireError("BAD_REQUEST", f"frame 0 (the header) nests objects and lists more than {MAX_HEADER_DEPTH} deep")
    try:
        header = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise WireError("BAD_REQUEST", f"frame 0 (the header) is not valid JSON: {exc}") from None
    if not isinstance(header, dict):
        raise WireError("BAD_REQUEST", f"frame 0 must be a JSON object, got a JSON {type(header).__name__}")
    where = _surrogate_path(header) if "\\u" in text else None  # only an escape can make one
    if where is not None:
        raise WireError("BAD_REQUEST", f"frame 0 (the header): {where} holds a lone UTF-16 surrogate escape "
                        "(such as \\ud800), which is not Unicode text; send valid UTF-8 strings")
    return header


def _nesting(text: str) -> int:
    """The deepest bracket nesting of a JSON text, brackets inside strings not counted (no recursion)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
        elif ch in "]}":
            depth -= 1
    return deepest


def _surrogate_path(value: Any, path: str = "a key") -> str | None:
    """Where the first string with a lone surrogate is (a key or a value), or None."""
    if isinstance(value, str):
        return path if _has_surrogate(value) else None
    if isinstance(value, dict):
        for k, v in value.items():
            if _has_surrogate(k):
                return "a key"
            found = _surrogate_path(v, f"field {k!r}")
            if found is not None:
                return found
    elif isinstance(value, list):
        for v in value:
            found = _surrogate_path(v, path)
            if found is not None:
                return found
    return None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def decode(frames: Sequence[bytes | memoryview], *, dtypes: Sequence[str] | None = ARRAY_DTYPES) -> Message:
    """Decode the frames of one message (envelope already removed).

    Arrays come back as read-only views on the frames in their wire dtype; ``dtypes`` lists the
    dtype strings accepted (None: any numeric dtype with an explicit byte order).

    Raises
    ------
    WireError
        BAD_REQUEST for a frame count, descriptor, dtype, shape or byte count that does not
        add up; TOO_LARGE for an oversized header.
    """
    if len(frames) == 0:
        raise WireError("BAD_REQUEST", "empty message: frame 0 must be a JSON header")
    header = decode_header(frames[0])
    descs = header.get("arrays", [])
    if descs is None:
        descs = []
    if not isinstance(descs, list):
        raise WireError("BAD_REQUEST", 'header field "arrays" must be a list of array descriptors')
    if len(descs) != len(frames) - 1:
        raise WireError(
            "BAD_REQUEST",
            f'header describes {len(descs)} array(s) in "arrays" but the message has '
            f"{len(frames) - 1} frame(s) after the header",
            {"described": len(descs), "frames": len(frames) - 1},
        )
    arrays: dict[str, np.ndarray] = {}
    for i, (desc, buf) in enumerate(zip(descs, frames[1:])):
        arrays_name, arr = _decode_array(i, desc, buf, dtypes)
        if arrays_name in arrays:
            raise WireError("BAD_REQUEST", f"array name {arrays_name!r} appears twice")
        arrays[arrays_name] = arr
    return Message(header, arrays)


def _decode_array(i: int, desc: Any, buf: bytes | memoryview, dtypes: Sequence[str] | None) -> tuple[str, np.ndarray]:
    where = f"array descriptor {i}"
    if not isinstance(desc, dict):
        raise WireError("BAD_REQUEST", f"{where} must be a JSON object with name, dtype, shape, nbytes")
    name = desc.get("name")
    if not isinstance(name, str) or not name:
        raise WireError("BAD_REQUEST", f"{where}: \"name\" must be a non-empty string")
    dt = desc.get("dtype")
    if not isinstance(dt, str):
        raise WireError("BAD_REQUEST", f"array {name!r}: \"dtype\" must be a string such as '<f8', got {_short(dt)}")
    if dtypes is not None and dt not in dtypes:
        raise WireError(
            "BAD_REQUEST",
            f"array {name!r}: dtype {dt!r} is not supported; send one of {', '.join(dtypes)} "
            "(explicit byte order; '<f8' is little-endian float64)",
            {"array": name, "dtype": dt, "supported": list(dtypes)},
        )
    try:
        dtype = np.dtype(dt)
    except TypeError:
        raise WireError("BAD_REQUEST", f"array {name!r}: {dt!r} is not a dtype") from None
    if dtype.kind not in "fiu" or dtype.hasobject or (dtype.itemsize > 1 and dt[:1] not in ("<", ">")):
        raise WireError("BAD_REQUEST", f"array {name!r}: dtype {dt!r} must be numeric with an explicit byte order")
    shape = desc.get("shape")
    if (
        not isinstance(shape, list)
        or len(shape) > 8
        or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= MAX_DIMENSION for s in shape)
    ):
        raise WireError(
            "BAD_REQUEST",
            f"array {name!r}: \"shape\" must be a list of at most 8 integers from 0 to 2**53 - 1, got {_short(shape)}",
        )
    expected = math.prod(shape) * dtype.itemsize  # Python integers: no overflow
    nbytes = desc.get("nbytes")
    if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 0:
        raise WireError("BAD_REQUEST", f"array {name!r}: \"nbytes\" must be the frame's length in bytes, got {_short(nbytes)}")
    size = len(memoryview(buf).cast("B")) if not isinstance(buf, bytes) else len(buf)
    if nbytes != size:
        raise WireError(
            "BAD_REQUEST",
            f"array {name!r}: header says nbytes={nbytes!r} but its frame has {size} bytes",
            {"array": name, "nbytes": nbytes, "frame_bytes": size},
        )
    if size != expected:
        raise WireError(
            "BAD_REQUEST",
            f"array {name!r}: shape {shape} of {dt} needs {expected} bytes, its frame has {size}",
            {"array": name, "expected_bytes": expected, "frame_bytes": size},
        )
    try:
        arr = np.frombuffer(buf, dtype=dtype).reshape(shape)
    except ValueError:  # an empty array with a dimension numpy cannot index
        raise WireError("BAD_REQUEST", f"array {name!r}: shape {shape} is too large for an array") from None
    return name, arr


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def make_request(
    op: str,
    request_id: str,
    session: str,
    params: Mapping[str, Any] | None = None,
    arrays: Mapping[str, np.ndarray] | None = None,
    *,
    expires_in: float | None = None,
) -> list[bytes | memoryview]:
    """Frames of a request; ``expires_in`` (seconds) lets the server drop it if not started by then."""
    header: dict[str, Any] = {
        "protocol": PROTOCOL,
        "v": VERSION,
        "type": "request",
        "op": op,
        "id": request_id,
        "session": session,
        "params": dict(params or {}),
    }
    if expires_in is not None:
        header["expires_in"] = float(expires_in)
    return encode(header, arrays)


def _reply_header(request: Mapping[str, Any] | None, server_session: str) -> dict[str, Any]:
    request = request or {}

    def echo(key: str) -> str | None:
        # Echoed as sent when a string of at most 128 characters (even "" or otherwise invalid),
        # so the client can match the reply; null when it cannot travel back as sent.
        value = request.get(key)
        return value if isinstance(value, str) and len(value) <= _MAX_ID and not _has_surrogate(value) else None

    return {
        "protocol": PROTOCOL,
        "v": VERSION,
        "type": "reply",
        "op": echo("op"),
        "id": echo("id"),
        "session": echo("session"),
        "server_session": server_session,
    }


def make_reply(
    request: Mapping[str, Any],
    server_session: str,
    result: Mapping[str, Any] | None = None,
    arrays: Mapping[str, np.ndarray] | None = None,
) -> list[bytes | memoryview]:
    """Frames of a success reply to ``request`` (its header)."""
    header = _reply_header(request, server_session)
    header["ok"] = True
    header["result"] = dict(result or {})
    return encode(header, arrays)


def make_error(
    code: str,
    message: str,
    *,
    request: Mapping[str, Any] | None = None,
    server_session: str = "",
    details: Mapping[str, Any] | None = None,
    retryable: bool | None = None,
) -> list[bytes | memoryview]:
    """Frames of an error reply; ``request`` is the request header if it could be parsed."""
    if code not in ERROR_CODES:
        raise ValueError(f"unknown error code {code!r}")
    header = _reply_header(request, server_session)
    header["ok"] = False
    header["error"] = {
        "code": code,
        "message": message,
        "retryable": ERROR_CODES[code] if retryable is None else bool(retryable),
        "details": dict(details or {}),
    }
    return encode(header)


def request_digest(header: Mapping[str, Any], frames: Sequence[bytes | memoryview]) -> str:
    """A fingerprint of what a request asks (op, params, array descriptors and bytes).

    A retried request must have the same digest; fields that may change between attempts (an
    attempt counter, a timestamp, unknown extensions) are not part of it.
    """
    h = hashlib.blake2b(digest_size=16)
    what = {"op": header.get("op"), "params": header.get("params"), "arrays": header.get("arrays")}
    h.update(json.dumps(sanitize(what), sort_keys=True, separators=(",", ":")).encode("utf-8"))
    for f in frames:
        h.update(f)
    return h.hexdigest()
