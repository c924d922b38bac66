"""``PostMessages.decode_parts``, the one decoding of a POST /messages body, gives
what ``decode`` and ``message_list`` give, and refuses what they refuse with the
same status, message and field, whichever body it is given (sans-io)."""

from __future__ import annotations

import pytest

from mnemex.server._http import HttpError
from mnemex.server._schemas import PostMessages

_MESSAGE = b'{"role":"user","content":"hi"}'

BODIES = [
    b'{"session_id":"s","messages":[' + _MESSAGE + b"]}",
    b'{"session_id":"s","query_id":"q","messages":[' + _MESSAGE + b"," + _MESSAGE + b"]}",
    b'{"conversation_id":"c","messages":[]}',
    b'{"session_id":"","conversation_id":"c","messages":[' + _MESSAGE + b"]}",
    b'{"session_id":"s","conversation_id":"s","messages":[1, "x", null]}',
    b'{"session_id":"s","conversation_id":"t","messages":[]}',
    b'{"messages":[' + _MESSAGE + b"]}",
    b'{"session_id":"","messages":[]}',
    b'{"session_id":"s"}',
    b'{"session_id":"s","messages":null}',
    b'{"session_id":"s","messages":"[]"}',
    b'{"session_id":"s","messages":{"role":"user"}}',
    b'{"messages":null}',
    b'{"session_id":"s","messages":[{"role":"user","content":"x","n":1e999}]}',
    b'{"session_id":"s","messages":[{"role":"user","content":"1e999"}]}',
    b'{"session_id":"1e999","messages":[' + _MESSAGE + b"]}",
    b'{"session_id":"s","messages":[{"n":' + b"9" * 400 + b"}]}",
    b'{"session_id":"s","messages":[{"n":' + b"9" * 40 + b"}]}",
    b'{"session_id":5,"messages":[]}',
    b'{"session_id":"s","messages":[],"extra":1}',
    b'{"session_id":"s","messages":[' + b"[" * 2000 + b"]" * 2000 + b"]}",
    b'{"session_id":"s","messages":[',
    b"[]",
    b"",
    b"   ",
    b'{"session_id":"s","messages":[{"role":"user",\n"content":"two\\nlines"}]}',
    b'{"session_id":"s","query_id":null,"messages":[' + _MESSAGE + b"]}",
]


def _outcome(call: object) -> object:
    try:
        return call()  # type: ignore[operator]
    except HttpError as exc:
        return ("refused", exc.status, str(exc), exc.field)


def _both_ways(raw: bytes) -> object:
    body = PostMessages.decode(raw)
    return body.session, body.query_id, body.message_list


@pytest.mark.parametrize("raw", BODIES)
def test_one_decoding_answers_as_decode_and_message_list(raw: bytes) -> None:
    expected = _outcome(lambda: _both_ways(raw))
    got = _outcome(lambda: PostMessages.decode_parts(raw))
    if isinstance(expected, tuple) and expected[0] != "refused":
        assert isinstance(got, tuple)
        assert got[:2] == expected[:2]
        assert [bytes(m) for m in got[2]] == [bytes(m) for m in expected[2]]
    else:
        assert got == expected
