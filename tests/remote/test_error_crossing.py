"""An error answered over HTTP comes back as the same mnemex exception, with what
the caller needs to act on it (NotOwner: the virtual shard and where to go)."""

from __future__ import annotations

import pickle

import msgspec
import pytest

from mnemex import errors
from mnemex.remote import wire
from mnemex.server._http import error_response


@pytest.mark.parametrize("exc", [
    errors.NotOwner("virtual shard 7 is leased to 'shard-2'", vshard=7, owner="shard-2", epoch=4),
    errors.NotOwner("virtual shard 9 is not owned here", vshard=9),
])
def test_not_owner_crosses_http_with_its_hint(exc: errors.NotOwner) -> None:
    response = error_response(exc)
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    back = wire.error_of(response.status_code, bytes(response.body))
    assert isinstance(back, errors.NotOwner) and str(back) == str(exc)
    assert (back.vshard, back.owner, back.epoch) == (exc.vshard, exc.owner, exc.epoch)


def test_not_owner_crosses_processes_whole() -> None:  # Ray and multiprocessing pickle errors
    exc = errors.NotOwner("taken over", vshard=3, owner="b", epoch=2)
    back = pickle.loads(pickle.dumps(exc))
    assert isinstance(back, errors.NotOwner) and (str(back), back.vshard, back.owner, back.epoch) == (
        "taken over", 3, "b", 2)


def test_other_errors_carry_no_shard_fields() -> None:
    response = error_response(errors.NotFound("no memory m1"))
    assert set(msgspec.json.decode(bytes(response.body))) == {"error", "type"}
