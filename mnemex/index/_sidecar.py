"""The binary sidecar format of the text indexes (keyword, BM25, entities).

A sidecar is an index's whole state as one bytes blob, so a scope restores its
indexes by copying arrays instead of tokenizing every record again::

    magic (8 bytes) | version (u32 LE) | header size (u32 LE) | checksum (16 bytes)
    | header (JSON, space-padded to 8 bytes) | body (arrays, each 8-byte aligned)

The magic names the index kind, the version the layout. The checksum is blake2b
(16 bytes) of everything else (magic, version, header size, header, body), so a
flipped byte anywhere is caught before anything is read. The header holds the
settings the index was built with, the number of documents, a checksum of their
sorted ids (see :func:`doc_ids_checksum`) and a spec per array (dtype, shape,
offset, nbytes); the body is the arrays' raw bytes in native byte order.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Self

import numpy as np
import numpy.typing as npt
import orjson

from mnemex._gcpause import collector_paused
from mnemex.errors import CorruptData

__all__ = ["LEND_MIN", "SIDECAR_VERSION", "Pieces", "Sidecar", "TermsByDoc", "byte_view", "corrupt",
           "doc_ids_checksum", "lent", "load_sidecar", "require_words_scheme",
           "pack_sidecar", "read_header", "sidecar_chunks", "sidecar_info", "unpack_sidecar"]

SIDECAR_VERSION = 1
# The layout. What a sidecar's words are (the tokenization) is a setting in its
# header's params instead: tokenizer.words_scheme() for the keyword and entity
# indexes, Tokenizer.signature for BM25, both carrying TOKENIZATION_VERSION, so a
# sidecar written before a tokenization change is refused as stale and the index
# is rebuilt from the records.

_PREAMBLE = struct.Struct("<8sII16s")
_CHECKED = struct.Struct("<8sII")     # the part of the preamble the checksum covers
_ALIGN = 8


def doc_ids_checksum(doc_ids: Iterable[int] | npt.NDArray[np.integer[Any]]) -> str:
    """blake2b (16 bytes, hex) of *doc_ids* (each once, in any order) sorted
    ascending as little-endian int64: what a sidecar's ``ids_checksum`` holds,
    so an owner can check a sidecar covers exactly the documents it restored."""
    if isinstance(doc_ids, np.ndarray):
        ids = np.sort(doc_ids.astype(np.int64, copy=False))
    else:
        ids = np.sort(np.fromiter(doc_ids, dtype=np.int64))
    return hashlib.blake2b(ids.astype("<i8", copy=False).tobytes(), digest_size=16).hexdigest()


def byte_view(array: npt.NDArray[Any]) -> memoryview | bytes:
    """The bytes of ``array`` in C order, without a copy when it is contiguous
    already (a view: keep the array unchanged while the view is in use)."""
    contiguous = np.ascontiguousarray(array)
    return contiguous.data.cast("B") if contiguous.nbytes else b""  # a view of no bytes cannot be cast


def pack_sidecar(magic: bytes, header: Mapping[str, Any], arrays: Mapping[str, npt.NDArray[Any]]) -> bytes:
    """One blob holding *header* (JSON-able) and *arrays*, in the layout above."""
    return b"".join(sidecar_chunks(magic, header, arrays))


@dataclass(frozen=True, slots=True)
class Pieces:
    """A one-dimensional array of ``dtype`` given as the byte buffers that hold it end
    to end (a live index's own, lent to a snapshot taken as its scope closes: no copy
    of them is made)."""

    dtype: np.dtype[Any]
    parts: Sequence[memoryview | bytes]
    rows: int | None = None
    """Given: a two-dimensional array of that many rows, the parts its rows' bytes."""

    @property
    def nbytes(self) -> int:
        return sum(len(part) for part in self.parts)


LEND_MIN: Final = 4096
"""Bytes from which :func:`lent` lends a buffer rather than copying it: a view costs
~184 bytes of its own, more than the few postings of a rare word."""

_GATHERED: Final = 1 << 20
"""Bytes of small buffers :func:`lent` copies into one part."""


def lent(buffers: Iterable[Any]) -> list[memoryview | bytes]:
    """The bytes of ``buffers`` (anything with the buffer protocol), end to end, as
    :class:`Pieces`' parts: each of ``LEND_MIN`` bytes or more a view of it, those
    smaller copied together between them (a part of at most about a MB)."""
    parts: list[memoryview | bytes] = []
    small = bytearray()
    for buffer in buffers:
        view = memoryview(buffer).cast("B")
        if len(view) < LEND_MIN:
            small += view
            if len(small) < _GATHERED:
                continue
            view = memoryview(b"")
        if small:
            parts.append(bytes(small))
            small.clear()
        if view:
            parts.append(view)
    if small:
        parts.append(bytes(small))
    return parts


def sidecar_chunks(magic: bytes, header: Mapping[str, Any],
                   arrays: Mapping[str, npt.NDArray[Any] | Pieces]) -> list[bytes | memoryview]:
    """:func:`pack_sidecar`'s blob as the chunks it joins, without joining them (a
    snapshot writes them one after another: no second copy of a large index). The
    arrays' chunks are views of them (and a :class:`Pieces`' its parts): they must
    not change while the chunks are in use (give copies of an index's live arrays,
    unless nothing changes it any more)."""
    specs: list[dict[str, Any]] = []
    parts: list[memoryview | bytes] = []
    offset = 0
    for name, array in arrays.items():
        if isinstance(array, Pieces):
            nbytes = array.nbytes
            if nbytes % array.dtype.itemsize:
                raise ValueError(f"sidecar array {name}: {nbytes} bytes of {array.dtype.str} items")
            dtype, shape = array.dtype.str, [nbytes // array.dtype.itemsize]
            if array.rows is not None:
                if shape[0] % max(1, array.rows) or (shape[0] and not array.rows):
                    raise ValueError(f"sidecar array {name}: {nbytes} bytes in {array.rows} rows")
                shape = [array.rows, shape[0] // array.rows if array.rows else 0]
            parts.extend(part for part in array.parts if len(part))
        else:
            contiguous = np.ascontiguousarray(array)
            nbytes, dtype, shape = contiguous.nbytes, contiguous.dtype.str, list(contiguous.shape)
            if nbytes:
                parts.append(byte_view(contiguous))
        specs.append({"name": name, "dtype": dtype, "shape": shape, "offset": offset, "nbytes": nbytes})
        padding = -nbytes % _ALIGN
        if padding:
            parts.append(bytes(padding))
        offset += nbytes + padding
    encoded = orjson.dumps({**header, "arrays": specs})
    encoded += b" " * (-(_PREAMBLE.size + len(encoded)) % _ALIGN)
    digest = hashlib.blake2b(_CHECKED.pack(magic, SIDECAR_VERSION, len(encoded)), digest_size=16)
    digest.update(encoded)
    for part in parts:
        digest.update(part)
    preamble = _PREAMBLE.pack(magic, SIDECAR_VERSION, len(encoded), digest.digest())
    return [preamble, encoded, *parts]


def sidecar_info(data: bytes | memoryview, magic: bytes, what: str) -> dict[str, Any]:
    """What a sidecar covers, read from its header alone (cheap; the checksum is
    checked only when the sidecar is loaded): ``docs`` (count), ``ids_checksum``
    (see :func:`doc_ids_checksum`), ``params`` (the settings it was built with)
    and ``version``. CorruptData when the header cannot be read."""
    header, _ = read_header(data, magic, what)
    docs, ids_checksum, params = header.get("docs"), header.get("ids_checksum"), header.get("params")
    if not isinstance(docs, int) or not isinstance(ids_checksum, str) or not isinstance(params, dict):
        raise CorruptData(f"{what} sidecar header lacks docs, ids_checksum or params")
    return {"version": SIDECAR_VERSION, "docs": docs, "ids_checksum": ids_checksum, "params": params}


def read_header(data: bytes | memoryview, magic: bytes, what: str) -> tuple[dict[str, Any], int]:
    """The header of a sidecar and where its body starts, after checking the magic,
    version and sizes (not the checksum). CorruptData names what is wrong."""
    body_start = _check_preamble(data, magic, what)
    try:
        header = orjson.loads(data[_PREAMBLE.size : body_start])
    except orjson.JSONDecodeError as exc:
        raise CorruptData(f"{what} sidecar header is not valid JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise CorruptData(f"{what} sidecar header is a {type(header).__name__}, not an object")
    return header, body_start


def _check_preamble(data: bytes | memoryview, magic: bytes, what: str) -> int:
    """Where the body starts, once the magic, version and header size are right."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise CorruptData(f"{what} sidecar must be bytes, got {type(data).__name__}")
    if len(data) < _PREAMBLE.size:
        raise CorruptData(f"{what} sidecar is {len(data)} bytes, shorter than its {_PREAMBLE.size}-byte "
                          "preamble: truncated")
    found, version, header_size, _ = _PREAMBLE.unpack_from(data, 0)
    if found != magic:
        raise CorruptData(f"{what} sidecar starts with {bytes(found)!r}, not {magic!r}: "
                          "not a sidecar of this index kind")
    if version != SIDECAR_VERSION:
        raise CorruptData(f"{what} sidecar has format version {version}; this build reads version "
                          f"{SIDECAR_VERSION}: rebuild the index from its records")
    body_start: int = _PREAMBLE.size + header_size
    if body_start > len(data):
        raise CorruptData(f"{what} sidecar is {len(data)} bytes but its header ends at byte "
                          f"{body_start}: truncated")
    return body_start


@dataclass(frozen=True)
class Sidecar:
    """A checked sidecar: its header and its arrays as read-only views of the data.
    ``spans`` gives each array's byte range in ``data`` (to slice bytes directly)."""

    data: bytes
    header: dict[str, Any]
    arrays: dict[str, npt.NDArray[Any]]
    spans: dict[str, tuple[int, int]]


def unpack_sidecar(data: bytes | memoryview, magic: bytes, what: str,
                   schema: Mapping[str, npt.DTypeLike]) -> Sidecar:
    """Check a sidecar whole (magic, version, checksum, array layout against
    *schema*: name -> dtype) and view its arrays. CorruptData names what is wrong."""
    _check_preamble(data, magic, what)
    if not isinstance(data, bytes):
        data = bytes(data)
    expected = _PREAMBLE.unpack_from(data, 0)[3]
    digest = hashlib.blake2b(data[: _CHECKED.size], digest_size=16)
    digest.update(memoryview(data)[_PREAMBLE.size :])
    if digest.digest() != expected:
        raise CorruptData(f"{what} sidecar fails its checksum ({len(data)} bytes): "
                          "damaged or truncated; rebuild the index from its records")
    header, body_start = read_header(data, magic, what)
    body_size = len(data) - body_start
    arrays: dict[str, npt.NDArray[Any]] = {}
    spans: dict[str, tuple[int, int]] = {}
    try:
        for spec in header["arrays"]:
            name = spec["name"]
            if name not in schema:
                raise CorruptData(f"{what} sidecar holds an unknown array {name!r}")
            dtype = np.dtype(schema[name])
            if spec["dtype"] != dtype.str:
                raise CorruptData(f"{what} sidecar array {name!r} has dtype {spec['dtype']}, "
                                  f"expected {dtype.str} (written on a machine of other byte order?)")
            shape = tuple(int(n) for n in spec["shape"])
            offset, nbytes = int(spec["offset"]), int(spec["nbytes"])
            if (nbytes != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize or offset < 0
                    or offset % _ALIGN or offset + nbytes > body_size):
                raise CorruptData(f"{what} sidecar array {name!r} ({nbytes} bytes at {offset}, shape "
                                  f"{list(shape)}) does not fit its {body_size}-byte body")
            start = body_start + offset
            arrays[name] = np.frombuffer(data, dtype=dtype, count=nbytes // dtype.itemsize,
                                         offset=start).reshape(shape)
            spans[name] = (start, start + nbytes)
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptData(f"{what} sidecar header has a malformed array spec: {exc!r}") from exc
    absent = sorted(set(schema) - set(arrays))
    if absent:
        raise CorruptData(f"{what} sidecar lacks the arrays {absent}")
    return Sidecar(data, header, arrays, spans)


class TermsByDoc:
    """Every document's terms, regrouped from term-major postings by one sort.

    A restored index keeps no per-document list of terms (building 10^5 tuples
    would cost more than the rest of the load); it asks this when it first has
    to remove a restored document. Built from the index's current postings, it
    stays right for every document not changed since, which is all it is asked
    about. About 8 bytes per posting."""

    __slots__ = ("_docs", "_term_ids", "_terms")

    def __init__(self, terms: list[str], counts: npt.NDArray[np.int64],
                 postings: npt.NDArray[np.integer[Any]]) -> None:
        n_terms = max(len(terms), 1)
        keys = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        keys += postings.astype(np.int64) * n_terms
        keys.sort()
        self._terms = terms
        self._term_ids = (keys % n_terms).astype(np.int32)
        self._docs = (keys // n_terms).astype(np.int32)

    def terms_of(self, doc_id: int) -> tuple[str, ...]:
        # The needle in the haystack's dtype, or numpy converts all of _docs per call.
        needle = np.int32(doc_id)
        lo = int(np.searchsorted(self._docs, needle, side="left"))
        hi = int(np.searchsorted(self._docs, needle, side="right"))
        terms = self._terms
        return tuple(terms[i] for i in self._term_ids[lo:hi].tolist())


def load_sidecar(index: Any, data: bytes | memoryview, magic: bytes, what: str,
                 schema: Mapping[str, npt.DTypeLike], *, check: Callable[[Any], None]) -> None:
    """Unpack *data* and fill *index* from it with its ``_load``: ``check`` sees the
    header's ``params`` first (it raises CorruptData when they are stale); the
    collector is paused meanwhile, and a load that trips on bad contents is
    CorruptData naming ``what``."""
    sidecar = unpack_sidecar(data, magic, what, schema)
    check(sidecar.header.get("params"))
    try:
        with collector_paused():
            index._load(sidecar)
    except (KeyError, TypeError, ValueError, IndexError, UnicodeDecodeError) as exc:
        raise corrupt(what, repr(exc)) from exc


def require_words_scheme(what: str, scheme: str) -> Callable[[Any], None]:
    """A ``check`` for :func:`load_sidecar`: the sidecar was built with the ``words()``
    tokenization *scheme* (see ``tokenizer.words_scheme``)."""
    def check(built: Any) -> None:
        if not isinstance(built, dict) or built.get("words") != scheme:
            raise CorruptData(f"{what} sidecar is stale: it was built with {built!r} (this index: "
                              f"{ {'words': scheme}!r}); rebuild the index from its records")
    return check


def corrupt(what: str, problem: str) -> CorruptData:
    """CorruptData for a sidecar whose parts disagree with each other."""
    return CorruptData(f"{what} sidecar is inconsistent: {problem}; rebuild the index from its records")


class SidecarIndex:
    """What the indexes kept as sidecars share: reading a sidecar's header, and (for
    the indexes whose only setting is their ``words()`` tokenization) reading one
    back. A subclass names its ``sidecar_magic``, ``sidecar_name`` and
    ``sidecar_arrays`` and fills itself in ``_load``."""

    sidecar_magic: ClassVar[bytes]
    sidecar_name: ClassVar[str]
    sidecar_arrays: ClassVar[Mapping[str, npt.DTypeLike]]

    @classmethod
    def sidecar_info(cls, data: bytes | memoryview) -> dict[str, Any]:
        """What a sidecar of this index covers, from its header alone: ``docs``,
        ``ids_checksum`` (compare with :func:`doc_ids_checksum` of the ids the owner
        restored), ``params`` and ``version``. CorruptData when unreadable."""
        return sidecar_info(data, cls.sidecar_magic, cls.sidecar_name)

    def _load_words_sidecar(self, data: bytes | memoryview, scheme: str) -> Self:
        """This (new, empty) index filled from *data*, which must have been built
        with the ``words()`` tokenization *scheme* (see ``from_sidecar``)."""
        load_sidecar(self, data, self.sidecar_magic, self.sidecar_name, self.sidecar_arrays,
                     check=require_words_scheme(self.sidecar_name, scheme))
        return self
