"""An embedder from the user's own ONNX model (config.models.embedder = "onnx"),
tested on tiny graphs made by the test (model_fakes): its vectors against the
token table the graph holds, pooling, prefixes, the name that identifies the
model, every refusal at load naming its setting, and a scope embedding with it."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest
from model_fakes import DIM, TABLE, token_ids, write_cross_encoder, write_embedder, write_tokenizer

import mnemex
from mnemex.errors import EmbedderError, InvalidInput
from mnemex.models import embedders
from mnemex.models.embedders import OnnxEmbedder, embedder_from_config
from mnemex.models.hashing import Embedder

TEXTS = ["the user works as a nurse", "lives in berlin", "likes tea", "what does the user do for work"]


def expected(text: str, pooling: str = "mean", max_length: int = 512) -> np.ndarray:
    """What the tiny graph's vector of ``text`` must be: its token rows pooled, unit length."""
    rows = TABLE[token_ids(text, max_length)]
    vector = {"mean": rows.mean(axis=0), "cls": rows[0], "last": rows[-1]}[pooling]
    return vector / np.linalg.norm(vector)


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- vectors --------------------------------------------------------------------------------------
@pytest.mark.parametrize("pooling", ["mean", "cls", "last"])
def test_vectors_are_the_pooled_token_vectors_at_unit_length(embedder_dir: Path, pooling: str) -> None:
    embedder = OnnxEmbedder(embedder_dir, pooling=pooling)  # type: ignore[arg-type]
    vectors = embedder.embed(TEXTS)
    assert vectors.dtype == np.float32 and vectors.shape == (len(TEXTS), DIM) == (len(TEXTS), embedder.dim)
    np.testing.assert_allclose(vectors, [expected(text, pooling) for text in TEXTS], rtol=0, atol=1e-6)


def test_a_batch_comes_back_in_the_callers_order_and_blank_texts_get_zero_rows(embedder_dir: Path) -> None:
    embedder = OnnxEmbedder(embedder_dir)
    texts = [*TEXTS, "", "  \t", *reversed(TEXTS)] * 9  # 90 texts of mixed lengths: three model calls
    vectors = embedder.embed(texts)
    for i in (0, 3, 4, 5, 31, 89):
        if texts[i].strip():
            np.testing.assert_allclose(vectors[i], expected(texts[i]), rtol=0, atol=1e-6)
        else:
            assert not vectors[i].any()
    assert embedder.embed([]).shape == (0, DIM)


def test_texts_are_cut_to_max_length_tokens(embedder_dir: Path) -> None:
    long = "the user works as a nurse at the hospital in berlin"
    embedder = OnnxEmbedder(embedder_dir, max_length=8)
    np.testing.assert_allclose(embedder.embed([long])[0], expected(long, max_length=8), rtol=0, atol=1e-6)
    assert not np.allclose(embedder.embed([long])[0], expected(long), atol=1e-3)


def test_prefixes_go_before_stored_texts_and_before_queries(embedder_dir: Path) -> None:
    embedder = OnnxEmbedder(embedder_dir, query_prefix="query: ", document_prefix="passage: ")
    plain = OnnxEmbedder(embedder_dir)
    np.testing.assert_allclose(embedder.embed(["likes tea"]), plain.embed(["passage: likes tea"]), atol=1e-6)
    np.testing.assert_allclose(embedder.embed_queries(["likes tea"]), plain.embed(["query: likes tea"]),
                               atol=1e-6)
    assert not embedder.embed([" "]).any() and not embedder.embed_queries([""]).any()  # blank stays blank
    with pytest.raises(InvalidInput, match="embed_queries takes a sequence of texts"):
        embedder.embed_queries("likes tea")


def test_a_graph_that_pools_itself_is_taken_as_it_is(tmp_path: Path) -> None:
    write_embedder(tmp_path / "model.onnx", output="sentence_embedding", sentence=True)
    write_tokenizer(tmp_path / "tokenizer.json")
    embedder = OnnxEmbedder(tmp_path, pooling="cls")  # pooling does not apply to a pooled output
    np.testing.assert_allclose(embedder.embed(TEXTS), [expected(text) for text in TEXTS], rtol=0, atol=1e-6)


def test_normalize_false_takes_a_graph_that_normalises_itself(tmp_path: Path) -> None:
    write_embedder(tmp_path / "model.onnx", output="sentence_embedding", sentence=True, normalized=True)
    write_tokenizer(tmp_path / "tokenizer.json")
    embedder = OnnxEmbedder(tmp_path, normalize=False)
    np.testing.assert_allclose(embedder.embed(TEXTS), [expected(text) for text in TEXTS], rtol=0, atol=1e-6)


def test_normalize_false_refuses_a_graph_whose_vectors_are_not_unit(embedder_dir: Path) -> None:
    with pytest.raises(InvalidInput, match=r"normalize is false.*norm .*set normalize = true") as info:
        OnnxEmbedder(embedder_dir, normalize=False)
    assert info.value.field == "models.normalize"


# -- the name ----------------------------------------------------------------------------------------
def test_the_name_is_the_model_files_digest_wherever_the_files_are(embedder_dir: Path,
                                                                    tmp_path: Path) -> None:
    model = embedder_dir / "onnx" / "model.onnx"
    by_directory = OnnxEmbedder(embedder_dir)
    assert isinstance(by_directory, Embedder)
    assert by_directory.name == f"onnx:{sha256_of(model)[:12]}"
    moved = tmp_path / "elsewhere" / "renamed.onnx"
    moved.parent.mkdir()
    shutil.copy(model, moved)
    by_files = OnnxEmbedder(moved, tokenizer=embedder_dir / "tokenizer.json")
    assert by_files.name == by_directory.name and OnnxEmbedder(model).name == by_directory.name
    np.testing.assert_array_equal(by_files.embed(TEXTS), by_directory.embed(TEXTS))


def test_another_model_or_other_settings_give_another_name(embedder_dir: Path, tmp_path: Path) -> None:
    other = write_embedder(tmp_path / "other" / "model.onnx", scale=2.0)
    write_tokenizer(tmp_path / "other" / "tokenizer.json")
    names = {OnnxEmbedder(embedder_dir).name, OnnxEmbedder(other).name,
             OnnxEmbedder(embedder_dir, pooling="cls").name, OnnxEmbedder(embedder_dir, max_length=128).name,
             OnnxEmbedder(embedder_dir, query_prefix="query: ").name,
             OnnxEmbedder(embedder_dir, document_prefix="passage: ").name}
    assert len(names) == 6
    assert OnnxEmbedder(embedder_dir, pooling="cls").name == OnnxEmbedder(embedder_dir, pooling="cls").name
    # normalising or not gives the same vectors (else the model is refused): the same name
    assert OnnxEmbedder(embedder_dir).name == OnnxEmbedder(embedder_dir, normalize=True).name


# -- refused at load -----------------------------------------------------------------------------------
def test_a_sha256_that_is_given_is_checked(embedder_dir: Path) -> None:
    digest = sha256_of(embedder_dir / "onnx" / "model.onnx")
    assert OnnxEmbedder(embedder_dir, sha256=digest.upper()).name == f"onnx:{digest[:12]}"
    wrong = "0" * 64
    with pytest.raises(InvalidInput, match=f"has sha256 {digest}, not the {wrong} configured") as info:
        OnnxEmbedder(embedder_dir, sha256=wrong)
    assert info.value.field == "models.onnx_sha256"


def test_missing_files_are_named_with_their_setting(embedder_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="does not exist") as info:
        OnnxEmbedder(tmp_path / "nowhere")
    assert info.value.field == "models.onnx_path"
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InvalidInput, match=r"holds neither model\.onnx nor onnx/model\.onnx") as info:
        OnnxEmbedder(empty)
    assert info.value.field == "models.onnx_path"
    (embedder_dir / "tokenizer.json").unlink()
    with pytest.raises(InvalidInput, match=r"no tokenizer\.json beside") as info:
        OnnxEmbedder(embedder_dir)
    assert info.value.field == "models.onnx_tokenizer"
    with pytest.raises(InvalidInput, match="is not a file") as info:
        OnnxEmbedder(embedder_dir, tokenizer=tmp_path / "tokenizer.json")
    assert info.value.field == "models.onnx_tokenizer"


def test_a_file_that_is_not_a_tokenizer_is_refused(embedder_dir: Path) -> None:
    (embedder_dir / "tokenizer.json").write_text('{"version": "1.0", "model": "nothing"}')
    with pytest.raises(InvalidInput, match=r"is not a tokenizer\.json") as info:
        OnnxEmbedder(embedder_dir)
    assert info.value.field == "models.onnx_tokenizer"


def test_a_file_that_is_not_an_onnx_graph_is_refused(embedder_dir: Path) -> None:
    (embedder_dir / "onnx" / "model.onnx").write_bytes(b"not an onnx graph")
    with pytest.raises(EmbedderError, match=r"could not load .*model.onnx.*config.models.onnx_path"):
        OnnxEmbedder(embedder_dir)


def test_a_graph_taking_inputs_mnemex_cannot_feed_is_refused(tmp_path: Path) -> None:
    write_embedder(tmp_path / "model.onnx", extra_input="position_ids")
    write_tokenizer(tmp_path / "tokenizer.json")
    with pytest.raises(InvalidInput, match=r"cannot feed \['position_ids'\]") as info:
        OnnxEmbedder(tmp_path)
    assert info.value.field == "models.onnx_path"


def test_a_graph_without_vectors_of_texts_is_refused(tmp_path: Path) -> None:
    write_cross_encoder(tmp_path / "model.onnx", flat=True)  # one number a text: (batch,)
    write_tokenizer(tmp_path / "tokenizer.json")
    with pytest.raises(InvalidInput, match=r"has the outputs logits \(rank 1\); mnemex reads token vectors") \
            as info:
        OnnxEmbedder(tmp_path)
    assert info.value.field == "models.onnx_path"


def test_a_symbolic_width_is_read_from_a_probe(tmp_path: Path) -> None:
    write_embedder(tmp_path / "model.onnx", declared_dim="hidden")
    write_tokenizer(tmp_path / "tokenizer.json")
    assert OnnxEmbedder(tmp_path).dim == DIM


# -- from the configuration, in a scope ----------------------------------------------------------------
def test_config_needs_a_path_for_the_onnx_embedder() -> None:
    with pytest.raises(InvalidInput, match="onnx_path is not set") as info:
        mnemex.Config(embedder="onnx")
    assert info.value.field == "models.onnx_path"
    with pytest.raises(InvalidInput, match="pooling"):
        mnemex.Config(embedder="onnx", onnx_path="x", pooling="max")


def test_config_shares_one_embedder_per_model_and_settings(embedder_dir: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedders, "_loaded", {})
    config = mnemex.Config(embedder="onnx", onnx_path=str(embedder_dir))
    first = embedder_from_config(config)
    assert isinstance(first, OnnxEmbedder)
    assert embedder_from_config(config.replace(embed_batch_size=7)) is first
    assert embedder_from_config(config.replace(pooling="cls")) is not first
    with pytest.raises(InvalidInput):
        embedder_from_config(config.replace(onnx_sha256="1" * 64))
    assert len(embedders._loaded) == 2  # the failed load is not remembered


async def test_a_scope_stores_and_searches_with_the_users_model(embedder_dir: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedders, "_loaded", {})
    config = mnemex.Config(data_dir=None, embedder="onnx", onnx_path=str(embedder_dir),
                           query_prefix="query: ", document_prefix="passage: ")
    async with mnemex.open_runtime(config) as rt:
        scope = rt.scope(user_id="alice", app_name="chat")
        assert scope.embedder.name.startswith("onnx:")
        memories = ["the user works as a nurse", "likes tea", "lives in berlin"]
        await scope.remember_many(memories)
        result = await scope.search("where does alice work", top_k=3, mode="vector", min_score=None)
        # the query went in with its prefix, the memories with theirs
        query = OnnxEmbedder(embedder_dir).embed(["query: where does alice work"])[0]
        stored = OnnxEmbedder(embedder_dir).embed([f"passage: {text}" for text in memories])
        cosines = dict(zip(memories, (stored @ query).tolist(), strict=True))
        assert [hit.memory.content for hit in result.hits] == sorted(memories, key=lambda m: -cosines[m])
        for hit in result.hits:
            assert hit.scores["cosine"] == pytest.approx(cosines[hit.memory.content], abs=1e-5)
