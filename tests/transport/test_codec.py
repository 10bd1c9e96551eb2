"""The codec alone: bytes in, bytes out, no sockets."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from rcvgp.errors import ProtocolError
from rcvgp.transport import codec
from rcvgp.transport.codec import WireError


def _frames(header: dict, *buffers: bytes) -> list[bytes]:
    return [json.dumps(header).encode(), *buffers]


@pytest.mark.parametrize("seed", range(25))
def test_decode_encode_roundtrip_is_identity(seed: int) -> None:
    rng = np.random.default_rng(seed)
    shape = tuple(int(s) for s in rng.integers(0, 5, size=rng.integers(1, 3)))
    dtype = rng.choice(["<f8", ">f8", "<f4", ">f4"])
    X = rng.normal(size=shape).astype(dtype)
    if X.size:
        X.flat[0] = np.nan
    params = {"k": int(rng.integers(100)), "nested": {"s": "é", "f": float(rng.normal())}}
    frames = codec.make_request("measure", f"id{seed}", "sess", params, {"X": X})
    msg = codec.decode([bytes(f) for f in frames])
    assert msg.header["params"] == params
    assert msg.op == "measure" and msg.id == f"id{seed}"
    out = msg.arrays["X"]
    assert out.dtype == X.dtype and out.shape == X.shape
    assert out.tobytes() == X.tobytes()  # bit for bit, NaN included


def test_arrays_travel_with_explicit_byte_order_and_nbytes() -> None:
    frames = codec.encode({"op": "x"}, {"y": np.arange(6, dtype=float).reshape(2, 3)})
    header = json.loads(bytes(frames[0]))
    assert header["arrays"] == [{"name": "y", "dtype": "<f8", "shape": [2, 3], "nbytes": 48}]
    assert bytes(frames[1]) == np.arange(6, dtype="<f8").tobytes()


def test_non_contiguous_arrays_are_sent_c_contiguous() -> None:
    X = np.arange(12, dtype=float).reshape(3, 4)[:, ::2]
    msg = codec.decode([bytes(f) for f in codec.encode({}, {"X": X})])
    np.testing.assert_array_equal(msg.arrays["X"], X)


def test_object_arrays_are_refused_never_pickled() -> None:
    with pytest.raises(WireError, match="cannot travel"):
        codec.encode({}, {"X": np.array([{"a": 1}], dtype=object)})


@pytest.mark.parametrize(
    "frames, fragment",
    [
        ([], "empty message"),
        ([b"\xff\xfe"], "not valid UTF-8"),
        ([b"{nope"], "not valid JSON"),
        ([b"[1,2]"], "must be a JSON object"),
        ([b'{"a": NaN}'], "not valid JSON"),
        (_frames({"arrays": [{"name": "X", "dtype": "<f8", "shape": [1], "nbytes": 8}]}), "1 array(s)"),
        (_frames({"arrays": []}, b"12345678"), "0 array(s)"),
        (_frames({"arrays": [{"name": "X", "dtype": "<f8", "shape": [2], "nbytes": 8}]}, b"12345678"), "needs 16 bytes"),
        (_frames({"arrays": [{"name": "X", "dtype": "<f8", "shape": [1], "nbytes": 16}]}, b"12345678"), "nbytes=16"),
        (_frames({"arrays": [{"name": "X", "dtype": "=f8", "shape": [1], "nbytes": 8}]}, b"12345678"), "not supported"),
        (_frames({"arrays": [{"name": "X", "dtype": "<c16", "shape": [1], "nbytes": 16}]}, bytes(16)), "not supported"),
        (_frames({"arrays": [{"name": "X", "dtype": "<f8", "shape": [-1], "nbytes": 8}]}, bytes(8)), "shape"),
        (_frames({"arrays": "X"}), '"arrays" must be a list'),
        (_frames({"arrays": [{"name": "X", "dtype": "<f8", "shape": [1], "nbytes": 8}] * 2}, bytes(8), bytes(8)), "twice"),
    ],
)
def test_decode_rejects_malformed_messages_with_bad_request(frames: list[bytes], fragment: str) -> None:
    with pytest.raises(WireError) as info:
        codec.decode(frames)
    assert info.value.code == "BAD_REQUEST"
    assert fragment in info.value.message
    assert isinstance(info.value, ProtocolError)


def test_oversized_header_is_too_large() -> None:
    with pytest.raises(WireError) as info:
        codec.decode([b'{"x":"' + b"a" * codec.MAX_HEADER_BYTES + b'"}'])
    assert info.value.code == "TOO_LARGE"


def test_error_reply_has_the_frozen_shape() -> None:
    req = {"id": "7", "session": "s", "op": "measure"}
    header = json.loads(bytes(codec.make_error("BUSY", "later", request=req, server_session="S")[0]))
    assert header["ok"] is False and header["id"] == "7" and header["v"] == codec.VERSION
    assert header["error"] == {"code": "BUSY", "message": "later", "retryable": True, "details": {}}
    with pytest.raises(ValueError):
        codec.make_error("NOPE", "x")


def test_error_reply_sanitizes_non_finite_details() -> None:
    frames = codec.make_error("OUT_OF_LIMITS", "x", details={"value": float("nan")})
    assert json.loads(bytes(frames[0]))["error"]["details"]["value"] == "nan"


def test_version_mismatch_message_names_the_side_that_must_upgrade() -> None:
    assert "upgrade the server" in codec.version_mismatch_message((2, 0), (1, 0), we_are="server")
    assert "upgrade the client" in codec.version_mismatch_message((0, 9), (1, 0), we_are="server")
    assert "upgrade the client" in codec.version_mismatch_message((2, 0), (1, 0), we_are="client")


@pytest.mark.parametrize("text, expected", [("1.0", (1, 0)), ("1", (1, 0)), ("2.13", (2, 13)), ("1.2.3", (1, 2))])
def test_parse_version(text: str, expected: tuple[int, int]) -> None:
    assert codec.parse_version(text) == expected


@pytest.mark.parametrize("bad", [None, 1, "", "v1", "1.x", [1, 0]])
def test_parse_version_rejects_garbage(bad: object) -> None:
    with pytest.raises(WireError):
        codec.parse_version(bad)


def test_request_digest_ignores_header_noise_but_not_content() -> None:
    X = np.ones((2, 3))
    f1 = codec.make_request("measure", "1", "s", {}, {"X": X})
    f2 = codec.make_request("measure", "1", "s", {}, {"X": X + 1})
    h1 = json.loads(bytes(f1[0]))
    h1_noisy = dict(h1, attempt=3, x_timestamp=1.0)
    assert codec.request_digest(h1, f1[1:]) == codec.request_digest(h1_noisy, f1[1:])
    assert codec.request_digest(h1, f1[1:]) != codec.request_digest(json.loads(bytes(f2[0])), f2[1:])


# ---------------------------------------------------------------- issue 22: hostile headers


@pytest.mark.parametrize("text", [b'{"id": "\\ud800"}', b'{"op": "ping", "params": {"k": ["\\udfff"]}}', b'{"\\ud800": 1}'])
def test_a_lone_surrogate_anywhere_in_the_header_is_bad_request(text: bytes) -> None:
    with pytest.raises(WireError) as info:
        codec.decode_header(text)
    assert info.value.code == "BAD_REQUEST" and "surrogate" in info.value.message


def test_an_error_reply_can_always_be_encoded() -> None:
    request = {"op": "\ud800", "id": "\udfff", "session": "s\ud800"}
    frames = codec.make_error("BAD_REQUEST", "bad \ud800", request=request, details={"operation": "\ud800", "\udc00": 1})
    header = json.loads(bytes(frames[0]).decode("utf-8"))  # strict UTF-8
    assert header["op"] is None and header["id"] is None and header["session"] is None
    assert header["error"]["code"] == "BAD_REQUEST"


@pytest.mark.parametrize("bad", ["\u00b2.0", "\u0661.0", "1.\u0660", "\uff11.0", "1" * 5000, "1.0\n", " 1.0", "1.0.0.0"])
def test_versions_are_ascii_digits_only(bad: str) -> None:
    with pytest.raises(WireError) as info:
        codec.parse_version(bad)
    assert info.value.code == "BAD_REQUEST"


@pytest.mark.parametrize("shape", [[2**62, 4], [2**64, 4], [2**61, 4], [0, 2**64], [2**40, 2**40, 0], [2**53, 2]])
def test_a_shape_whose_size_overflows_is_bad_request(shape: list[int]) -> None:
    frames = _frames({"arrays": [{"name": "X", "dtype": "<f8", "shape": shape, "nbytes": 64}]}, bytes(64))
    with pytest.raises(WireError) as info:
        codec.decode(frames)
    assert info.value.code == "BAD_REQUEST"
    assert not re.search(r"-\d", info.value.message)  # never a negative byte count


@pytest.mark.parametrize("missing", ["name", "dtype", "shape", "nbytes"])
def test_every_descriptor_field_is_required(missing: str) -> None:
    desc = {"name": "X", "dtype": "<f8", "shape": [1], "nbytes": 8}
    del desc[missing]
    with pytest.raises(WireError) as info:
        codec.decode(_frames({"arrays": [desc]}, bytes(8)))
    assert info.value.code == "BAD_REQUEST" and f'"{missing}"' in info.value.message


@pytest.mark.parametrize("text", [b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 5000 + b"1" + b"}" * 5000])
def test_a_deeply_nested_header_is_bad_request(text: bytes) -> None:
    with pytest.raises(WireError) as info:
        codec.decode_header(text[: codec.MAX_HEADER_BYTES])
    assert info.value.code == "BAD_REQUEST"


def test_a_header_over_the_limit_is_too_large_with_documented_details() -> None:
    with pytest.raises(WireError) as info:
        codec.decode_header(b" " * (codec.MAX_HEADER_BYTES + 1))
    assert info.value.code == "TOO_LARGE"
    assert info.value.details == {"header_bytes": codec.MAX_HEADER_BYTES + 1, "max_header_bytes": codec.MAX_HEADER_BYTES}


@pytest.mark.parametrize("value, text", [(float("nan"), "nan"), (float("inf"), "inf"), (float("-inf"), "-inf")])
def test_non_finite_numbers_in_details_are_written_as_strings(value: float, text: str) -> None:
    header = json.loads(bytes(codec.make_error("OUT_OF_LIMITS", "x", details={"value": value})[0]))
    assert header["error"]["details"]["value"] == text


def test_the_schema_agrees_with_the_codec_on_error_codes_and_versions() -> None:
    from importlib import resources

    schema = json.loads(resources.files("rcvgp.protocols").joinpath("v1.schema.json").read_text(encoding="utf-8"))
    assert set(schema["$defs"]["error"]["properties"]["code"]["enum"]) == set(codec.ERROR_CODES)
    pattern = re.compile(schema["$defs"]["request"]["properties"]["v"]["pattern"])
    for text in ["1.0", "1", "1.2.3", "\u00b2.0", "\u0661.0", "1" * 10, "1.0.0.0", "v1", "", "01.1"]:
        try:
            codec.parse_version(text)
            accepted = True
        except WireError:
            accepted = False
        assert accepted is bool(pattern.fullmatch(text) and text.isascii()), text
