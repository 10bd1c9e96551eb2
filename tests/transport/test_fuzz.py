"""Property-based fuzzing of the codec and of a server in a thread (hypothesis, derandomized).

Every message, however malformed (headers, frames, dtypes, shapes, unicode with lone
surrogates), gets a reply; a client's mistake is never INTERNAL; nothing invalid reaches the
oracle; and the server still measures afterwards. The example budget is fixed and the search
derandomized, so a CI run is reproducible.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wire_helpers import SPEC, CountingFn, in_limits
from rcvgp.oracle import CallableOracle
from rcvgp.transport import codec
from rcvgp.transport.client import Channel
from rcvgp.transport.server import OracleServer

FUZZ = settings(max_examples=250, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Strings: any Unicode, and lone surrogates (json.dumps writes them as \ud800 escapes).
texts = st.one_of(st.text(max_size=20), st.sampled_from(["", "\ud800", "a\udfffb", "\u00b2.0", "\u0661.0", "x" * 129, "1.1"]))
scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                    st.floats(allow_nan=False, allow_infinity=False), texts)
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                            st.dictionaries(texts, inner, max_size=4)), max_leaves=12)
dtypes = st.one_of(st.sampled_from(["<f8", ">f8", "<f4", ">f4", "f8", "=f8", "|u1", "<i4", "<c16", "|O", "<M8[s]", "S8", "V8"]), texts)
dims = st.one_of(st.integers(min_value=0, max_value=6), st.sampled_from([-1, 2**53, 2**61, 2**62, 2**64]))
shapes = st.one_of(st.lists(dims, max_size=3), json_values)


@st.composite
def descriptors(draw: Any) -> dict[str, Any]:
    desc: dict[str, Any] = {"name": draw(st.one_of(st.just("X"), texts)), "dtype": draw(dtypes), "shape": draw(shapes)}
    desc["nbytes"] = draw(st.one_of(st.just(None), st.integers(min_value=-1, max_value=200), json_values))
    for key in draw(st.sets(st.sampled_from(sorted(desc)), max_size=2)):
        del desc[key]
    return desc


@st.composite
def messages(draw: Any) -> list[bytes]:
    """A request that is valid in most places and broken in a few."""
    if draw(st.integers(0, 9)) == 0:  # not JSON at all
        return [draw(st.binary(max_size=64))]
    header: dict[str, Any] = {"protocol": "rcvgp-oracle", "v": "1.1", "type": "request",
                              "op": draw(st.sampled_from(["measure", "measure", "ping", "status", "hello", "describe"])),
                              "id": draw(st.text(min_size=1, max_size=8)), "session": "fuzz", "params": {}}
    for key in draw(st.sets(st.sampled_from(["protocol", "v", "type", "op", "id", "session", "params", "expires_in", "x_extra"]),
                            max_size=3)):
        if draw(st.booleans()) and key in header:
            del header[key]
        else:
            header[key] = draw(json_values)
    X = in_limits(draw(st.integers(1, 4)), seed=draw(st.integers(0, 9)))
    if draw(st.booleans()):
        X = X.copy()
        X[0, 0] = draw(st.sampled_from([np.nan, np.inf, -5.0, 1e300]))
    buffers: list[bytes] = [X.tobytes()] * draw(st.integers(0, 2))
    good = {"name": "X", "dtype": "<f8", "shape": list(X.shape), "nbytes": int(X.nbytes)}
    header["arrays"] = draw(st.one_of(st.just([good] * len(buffers)), st.lists(st.one_of(st.just(good), descriptors()), max_size=2),
                                      json_values))
    text = json.dumps(header, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")
    return [text, *buffers]


# ---------------------------------------------------------------- the codec alone
@settings(FUZZ, max_examples=1000)  # no socket: cheap
@given(frames=messages())
def test_the_codec_decodes_or_says_why_and_its_error_reply_always_encodes(frames: list[bytes]) -> None:
    try:
        message = codec.decode(frames)
    except codec.WireError as exc:
        assert exc.code in ("BAD_REQUEST", "TOO_LARGE")
        try:
            request: Any = json.loads(frames[0].decode("utf-8", "surrogatepass"))
        except ValueError:
            request = None
        reply = codec.make_error(exc.code, exc.message, request=request if isinstance(request, dict) else None,
                                 details=exc.details)
        header = json.loads(bytes(reply[0]).decode("utf-8"))  # strict UTF-8
        assert header["ok"] is False and header["error"]["code"] == exc.code
    else:
        json.dumps(codec.sanitize(message.header)).encode("utf-8")
        for arr in message.arrays.values():
            assert arr.dtype.str in codec.ARRAY_DTYPES


# ---------------------------------------------------------------- a server in a thread
@pytest.fixture(scope="module")
def fuzzed() -> Iterator[tuple[OracleServer, CountingFn]]:
    fn = CountingFn()
    with OracleServer(CallableOracle(fn, SPEC), "tcp://127.0.0.1:*", max_message_bytes=2**20) as srv:
        yield srv, fn


def test_the_server_answers_every_fuzzed_message_never_internal_and_keeps_measuring(fuzzed: tuple[OracleServer, CountingFn]) -> None:
    server, fn = fuzzed
    seen: dict[str, int] = {}
    with Channel(server.endpoint) as ch:

        @FUZZ
        @given(frames=messages())
        def one(frames: list[bytes]) -> None:
            reply = codec.decode(ch.exchange(frames, None, timeout=5, deadline=5), dtypes=None)  # OracleTimeout: no reply
            header = reply.header
            code = "ok" if header["ok"] else header["error"]["code"]
            seen[code] = seen.get(code, 0) + 1
            assert code != "INTERNAL", header["error"]
            assert header["server_session"] == server.server_session

        one()
        after = codec.decode(ch.exchange(codec.make_request("measure", "after", "s", {}, {"X": in_limits(5)}), "after",
                                         timeout=5, deadline=10), dtypes=None)
    assert after.header["ok"] is True and after.arrays["y"].shape == (5,)
    assert seen.get("BAD_REQUEST", 0) > 50 and seen.get("ok", 0) > 0  # the messages did reach every branch
    for X in fn.calls:  # nothing out of limits ever reached the oracle
        assert X.shape[1] == 3 and all(var.contains(X[:, j]).all() for j, var in enumerate(SPEC.variables))
