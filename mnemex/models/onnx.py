"""ONNX graphs over token ids, run on onnxruntime and fed by a ``tokenizers``
tokenizer: what the built-in MiniLM embedder, an embedder from any ONNX
sentence-embedding model on disk, and a cross-encoder reranker share.

A :class:`TokenGraph` takes the inputs a Hugging Face export has (``input_ids``,
``attention_mask`` and optionally ``token_type_ids``, int64 or int32) and reads one
output. It runs a call as model runs of texts of similar length (see
:func:`runs_by_length`), pads on the right, and gives the rows back in the caller's
order. A graph that asks for other inputs, or has no
output of the expected shape, is refused when it is opened, naming the setting
that chose it.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt

from mnemex.errors import InvalidInput, ModelError

__all__ = ["Pooling", "TokenGraph", "default_threads", "file_sha256", "model_digest", "model_files",
           "onnx_session", "read_tokenizer", "runs_by_length"]

F32Matrix = npt.NDArray[np.float32]
I64Matrix = npt.NDArray[np.int64]
Pooling = Literal["mean", "cls", "last"]

_FED: Final = ("input_ids", "attention_mask", "token_type_ids")
_INPUT_TYPES: Final[dict[str, type[np.integer[Any]]]] = {"tensor(int64)": np.int64, "tensor(int32)": np.int32}


def file_sha256(path: Path) -> str:
    """The sha256 of the file at ``path``, read in chunks (a model may be GBs)."""
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def model_files(path: str | os.PathLike[str], tokenizer: str | os.PathLike[str] | None, path_field: str,
                tokenizer_field: str) -> tuple[Path, Path]:
    """The model file and the tokenizer file that ``path`` (a directory, or the
    ``.onnx`` file) and ``tokenizer`` (None: found beside the model, or one
    directory up) name; InvalidInput naming the config field when one is missing."""
    given = Path(path).expanduser()
    if given.is_dir():
        model = next((c for c in (given / "model.onnx", given / "onnx" / "model.onnx") if c.is_file()), None)
        if model is None:
            raise InvalidInput(f"config.models.{path_field}: {given} holds neither model.onnx nor "
                               f"onnx/model.onnx; give the directory of an ONNX export, or the .onnx file",
                               field=f"models.{path_field}")
    elif given.is_file():
        model = given
    else:
        raise InvalidInput(f"config.models.{path_field}: {given} does not exist (resolved from "
                           f"{os.getcwd()}); give the directory of an ONNX export, or the .onnx file",
                           field=f"models.{path_field}")
    if tokenizer is not None:
        found = Path(tokenizer).expanduser()
        if not found.is_file():
            raise InvalidInput(f"config.models.{tokenizer_field}: {found} is not a file; give the model's "
                               f"tokenizer.json", field=f"models.{tokenizer_field}")
        return model, found
    places = (model.parent / "tokenizer.json", model.parent.parent / "tokenizer.json")
    found_beside = next((place for place in places if place.is_file()), None)
    if found_beside is None:
        raise InvalidInput(f"config.models.{tokenizer_field}: no tokenizer.json beside {model} (looked in "
                           f"{places[0].parent} and {places[1].parent}); give it with "
                           f"config.models.{tokenizer_field}", field=f"models.{tokenizer_field}")
    return model, found_beside


def model_digest(model: Path, sha256: str | None, field: str) -> str:
    """The sha256 of ``model``, once it is ``sha256`` (when given)."""
    try:
        digest = file_sha256(model)
    except OSError as exc:
        raise InvalidInput(f"config.models: {model} cannot be read ({exc.strerror or exc})",
                           field=f"models.{field}") from exc
    if sha256 is not None and digest != sha256.lower():
        raise InvalidInput(f"config.models.{field}: {model} has sha256 {digest}, not the {sha256.lower()} "
                           f"configured; it is another model (or a damaged copy): fetch the file again, or "
                           f"set {field} to the new file's digest", field=f"models.{field}")
    return digest


def read_tokenizer(path: Path, max_length: int, *, field: str) -> tuple[Any, int]:
    """The ``tokenizers`` tokenizer saved at ``path`` (a ``tokenizer.json``), cutting
    every encoding to ``max_length`` tokens and padding none (the graph pads each
    batch itself), and the id it pads with (its padding's, else its ``[PAD]`` or
    ``<pad>`` token's, else 0). InvalidInput naming ``field`` when it cannot be read."""
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception for a missing or bad file
        raise InvalidInput(f"config.{field}: {path} is not a tokenizer.json the tokenizers library "
                           f"reads ({exc})", field=field) from exc
    padding = tokenizer.padding
    pad_id = padding["pad_id"] if padding else next(
        (found for token in ("[PAD]", "<pad>") if (found := tokenizer.token_to_id(token)) is not None), 0)
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length)
    return tokenizer, int(pad_id)


def onnx_session(model: bytes | Path, *, source: Path, threads: int, error: type[ModelError],
                 remedy: str) -> Any:
    """An onnxruntime session over ``model`` (its bytes, or its path: a path also
    finds weights stored beside the graph as external data) on the CPU, using at
    most ``threads`` threads a call. ``error`` naming ``source`` (the file), with
    ``remedy`` (what to do), when onnxruntime cannot load it."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # a spinning pool would keep the cores busy between calls, and the agent (and
    # its trio loop) shares them
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # the arena keeps the peak of every batch shape it has seen (a batch of long
    # texts leaves RSS near 1 GB); plain malloc costs little here
    options.enable_cpu_mem_arena = False
    options.log_severity_level = 3
    try:
        return onnxruntime.InferenceSession(model if isinstance(model, bytes) else str(model), options,
                                            providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise error(f"onnxruntime {onnxruntime.__version__} could not load {source} ({exc}); "
                    f"{remedy}") from exc


def runs_by_length(lengths: Sequence[int], *, max_texts: int, max_tokens: int,
                   run_cost: int) -> list[int]:
    """Where to cut texts sorted by ``lengths`` (ascending, in tokens) into model
    runs: the end index of each run, the last being ``len(lengths)``.

    A run costs about its padded tokens (texts x the longest) plus a fixed
    ``run_cost``, in tokens: what one more run costs onnxruntime (measured for
    MiniLM on two cores: about 1 ms, what 12 tokens of text cost; padding costs as
    much as text, and runs of 8 texts cost per token what runs of 32 do). So a
    text starts a new run when it would add more padding to the texts before it
    than a run costs, or when the run would pass ``max_texts`` texts or
    ``max_tokens`` padded tokens (past a thousand or two a run leaves the CPU's
    caches and each token costs more). A call of a few texts of scattered lengths
    then runs as a few short runs instead of one padded to the longest: LoCoMo
    turns in calls of 32 texts run 1.09 tokens per token of text, against 2.09 when
    cut every 32 texts (calls of 8: 1.09 against 1.64; of 256: 1.03 against 1.17).
    """
    cuts: list[int] = []
    count = width = 0
    for index, length in enumerate(lengths):
        if count and (count >= max_texts or (count + 1) * length > max_tokens
                      or count * (length - width) > run_cost):
            cuts.append(index)
            count = 0
        count += 1
        width = length
    if count:
        cuts.append(len(lengths))
    return cuts


def default_threads() -> int:
    """Threads one model call uses unless told: the CPUs, at most 4."""
    return max(1, min(4, os.cpu_count() or 1))


class TokenGraph:
    """An onnxruntime session over token ids with the tokenizer that feeds it.

    ``output`` is the output read: ``rank`` 3 (batch, tokens, dim) for token
    vectors, 2 (batch, n) for one row per text. ``dim`` is that output's last
    dimension when the graph declares it (None when it is symbolic). A call runs
    as model runs of at most ``batch_size`` texts and ``run_tokens`` padded tokens,
    cut by :func:`runs_by_length` with ``run_cost``. ``source`` says where the graph
    came from, ``sha256`` is its file's digest (None when it was given as bytes).
    Thread-safe: onnxruntime sessions and tokenizers serve concurrent calls."""

    def __init__(self, session: Any, tokenizer: Any, *, output: str, pad_id: int, source: str,
                 field: str, batch_size: int = 64, sha256: str | None = None, run_tokens: int = 1024,
                 run_cost: int = 12) -> None:
        self.session = session
        self.batch_size = batch_size
        self.run_tokens = run_tokens
        self.run_cost = run_cost
        self.sha256 = sha256
        self.tokenizer = tokenizer
        self.pad_id = pad_id
        self.source = source
        inputs = {node.name: node for node in session.get_inputs()}
        unknown = sorted(set(inputs) - set(_FED))
        missing = [name for name in _FED[:2] if name not in inputs]
        if unknown or missing:
            raise InvalidInput(
                f"config.{field}: {source} takes the inputs {sorted(inputs)}; mnemex feeds input_ids, "
                f"attention_mask and token_type_ids (the first two required), as a Hugging Face export of "
                f"an encoder has them" + (f"; it cannot feed {unknown}" if unknown else ""), field=field)
        self.inputs: tuple[tuple[str, type[np.integer[Any]]], ...] = tuple(
            (name, _INPUT_TYPES.get(inputs[name].type, np.int64)) for name in _FED if name in inputs)
        outputs = {node.name: node for node in session.get_outputs()}
        self.output = output
        shape = outputs[output].shape
        self.rank = len(shape)
        self.dim: int | None = shape[-1] if shape and isinstance(shape[-1], int) else None

    @classmethod
    def from_export(cls, path: str | os.PathLike[str], *, tokenizer: str | os.PathLike[str] | None,
                    sha256: str | None, max_length: int, threads: int | None, settings: str,
                    error: type[ModelError], remedy: str, ranks: Sequence[int], preferred: Sequence[str],
                    expected: str) -> TokenGraph:
        """A model exported to ONNX with its tokenizer, as the settings
        ``config.models.<settings>_path``, ``_tokenizer`` and ``_sha256`` name it: its
        files found (``model_files``), the model's digest checked (``model_digest``,
        kept as ``sha256``), the graph opened on ``threads`` (default: the CPUs, at
        most 4) and its output picked (``pick_output``). Every refusal names the
        setting it comes from; ``error`` with ``remedy`` when onnxruntime cannot load
        the graph."""
        model_file, tokenizer_file = model_files(path, tokenizer, f"{settings}_path", f"{settings}_tokenizer")
        digest = model_digest(model_file, sha256, f"{settings}_sha256")
        words, pad_id = read_tokenizer(tokenizer_file, max_length, field=f"models.{settings}_tokenizer")
        session = onnx_session(model_file, source=model_file, threads=threads or default_threads(),
                               error=error, remedy=remedy)
        field = f"models.{settings}_path"
        output = cls.pick_output(session, ranks, preferred, source=str(model_file), field=field,
                                 expected=expected)
        return cls(session, words, output=output, pad_id=pad_id, source=str(model_file), field=field,
                   sha256=digest)

    @staticmethod
    def pick_output(session: Any, ranks: Sequence[int], preferred: Sequence[str], *, source: str,
                    field: str, expected: str) -> str:
        """The name of the output to read: of the first rank in ``ranks`` the graph
        has an output of, the first of ``preferred`` there is, else the first such
        output. InvalidInput naming ``field`` (and what was ``expected``) when none fits."""
        outputs = [(node.name, len(node.shape)) for node in session.get_outputs()]
        for rank in ranks:
            fitting = [name for name, its in outputs if its == rank]
            if fitting:
                return next((name for name in preferred if name in fitting), fitting[0])
        shown = ", ".join(f"{name} (rank {rank})" for name, rank in outputs)
        raise InvalidInput(f"config.{field}: {source} has the outputs {shown}; mnemex reads {expected}",
                           field=field)

    def readable(self, text: str) -> float:
        """The share of ``text``'s word pieces the tokenizer knows (not its unknown
        token): 1.0 for a text without one, or for a tokenizer that has no unknown
        token (byte-level BPE reads everything)."""
        unknown = self._unknown_id
        if unknown is None:
            return 1.0
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        return 1.0 - ids.count(unknown) / len(ids) if ids else 1.0

    @functools.cached_property
    def _unknown_id(self) -> int | None:
        token = getattr(self.tokenizer.model, "unk_token", None)
        return self.tokenizer.token_to_id(token) if isinstance(token, str) else None

    def probe(self, sample: str | tuple[str, str], field: str) -> int:
        """Run ``sample`` (a text, or a pair) once and return the width of its output
        row; InvalidInput naming ``field`` when it differs from the declared one or
        is not finite."""
        encoding = self.tokenizer.encode(*((sample,) if isinstance(sample, str) else sample))
        _, output, _ = next(self._batches([encoding], skip_empty=False))
        width = output.shape[-1]
        if self.dim is not None and width != self.dim:
            raise InvalidInput(f"config.{field}: {self.source} declares an output {self.output} of width "
                               f"{self.dim} and gave {width}", field=field)
        if not np.isfinite(output).all():
            raise InvalidInput(f"config.{field}: {self.source} gave NaN or infinite values for a probe text",
                               field=field)
        return int(width)

    def _batches(self, encodings: Sequence[Any], *, skip_empty: bool
                 ) -> Iterator[tuple[I64Matrix, npt.NDArray[Any], I64Matrix]]:
        """(rows, output, attention mask) per model call: ``rows`` the indexes into
        ``encodings`` that call ran. ``skip_empty`` leaves out encodings made of
        special tokens only (an empty or blank text)."""
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
        order = np.argsort(lengths, kind="stable")
        if skip_empty:
            has_words = np.fromiter((0 in e.special_tokens_mask for e in encodings), dtype=bool,
                                    count=len(encodings))
            order = order[has_words[order]]
        start = 0
        for end in runs_by_length(lengths[order].tolist(), max_texts=self.batch_size,
                                  max_tokens=self.run_tokens, run_cost=self.run_cost):
            rows = order[start:end]
            start = end
            width = int(lengths[rows[-1]])
            ids = np.full((len(rows), width), self.pad_id, dtype=np.int64)
            types = np.zeros((len(rows), width), dtype=np.int64)
            for i, row in enumerate(rows):
                ids[i, :lengths[row]] = encodings[row].ids
                types[i, :lengths[row]] = encodings[row].type_ids
            mask = (np.arange(width) < lengths[rows, None]).astype(np.int64)
            fed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
            feed = {name: fed[name].astype(kind, copy=False) for name, kind in self.inputs}
            yield rows, self.session.run([self.output], feed)[0], mask

    def vectors(self, texts: Sequence[str], pooling: Pooling, dim: int) -> F32Matrix:
        """One float32 row of ``dim`` per text, as the graph gives it: token vectors
        pooled by ``pooling`` (rank 3) or the graph's own row (rank 2). Not
        normalised; a text with no token but special ones gets a zero row."""
        out = np.zeros((len(texts), dim), dtype=np.float32)
        if not texts:
            return out
        encodings = self.tokenizer.encode_batch(list(texts), add_special_tokens=True)
        for rows, output, mask in self._batches(encodings, skip_empty=True):
            out[rows] = _pooled(output, mask, pooling) if self.rank == 3 else output
        return out

    def pair_scores(self, pairs: Sequence[tuple[str, str]]) -> F32Matrix:
        """The graph's output for each (first, second) pair, encoded as the
        tokenizer's pair template puts them: shape (len(pairs), n) of float32."""
        encodings = self.tokenizer.encode_batch(list(pairs), add_special_tokens=True)
        out: F32Matrix | None = None
        for rows, output, _ in self._batches(encodings, skip_empty=False):
            part = np.asarray(output, dtype=np.float32).reshape(len(rows), -1)
            if out is None:
                out = np.zeros((len(pairs), part.shape[1]), dtype=np.float32)
            out[rows] = part
        return out if out is not None else np.zeros((0, 1), dtype=np.float32)


def _pooled(hidden: npt.NDArray[Any], mask: I64Matrix, pooling: Pooling) -> F32Matrix:
    """One vector per row of token vectors ``hidden`` (batch, tokens, dim): the mean
    of the tokens the mask keeps, the first token's, or the last kept token's."""
    if pooling == "cls":
        return np.asarray(hidden[:, 0], dtype=np.float32)
    if pooling == "last":
        return np.asarray(hidden[np.arange(len(mask)), mask.sum(axis=1) - 1], dtype=np.float32)
    weights = mask.astype(np.float32)
    sums = np.einsum("btd,bt->bd", hidden, weights)
    return np.asarray(sums / weights.sum(axis=1, keepdims=True), dtype=np.float32)
