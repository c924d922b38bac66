"""Fixtures of the model tests: models and a model server made by the tests
(see model_fakes)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from model_fakes import ModelServer, write_cross_encoder, write_embedder, write_tokenizer


@pytest.fixture
def embedder_dir(tmp_path: Path) -> Path:
    """A directory as a Hugging Face ONNX export has it: onnx/model.onnx, tokenizer.json."""
    folder = tmp_path / "tiny-embedder"
    write_embedder(folder / "onnx" / "model.onnx")
    write_tokenizer(folder / "tokenizer.json")
    return folder


@pytest.fixture
def cross_encoder_dir(tmp_path: Path) -> Path:
    """A cross-encoder export: model.onnx and tokenizer.json in one directory."""
    folder = tmp_path / "tiny-reranker"
    write_cross_encoder(folder / "model.onnx")
    write_tokenizer(folder / "tokenizer.json")
    return folder


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    server = ModelServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The retries' waits, recorded instead of slept."""
    from mnemex.models import http

    waits: list[float] = []
    monkeypatch.setattr(http, "_sleep", waits.append)
    return waits
