"""A hybrid query the embedder cannot read (memories.ref.MIN_READABLE): the default
English model turns "咖啡" and "ส้มตำ" into unknown tokens whose vectors are alike,
so such a query searches by words alone and says so."""

from __future__ import annotations

import pytest

import mnemex
from mnemex.memories.ref import MIN_READABLE
from mnemex.models.embedders import OnnxMiniLMEmbedder, readable
from mnemex.models.hashing import HashingEmbedder

MEMORIES = ["我每天早上喝一杯咖啡。", "ฉันชอบกินส้มตำมาก", "我在用TensorFlow训练模型", "My sister lives in Lisbon",
            "We adopted a puppy named Biscuit"]


@pytest.mark.parametrize(("text", "share"), [
    ("coffee", 1.0), ("", 1.0), ("Zoë in Москве", 1.0), ("咖啡", 0.0), ("ส้มตำ", 0.0),
])
def test_the_default_model_says_how_much_of_a_text_it_can_read(text: str, share: float) -> None:
    assert readable(OnnxMiniLMEmbedder(), text) == share


def test_an_embedder_that_does_not_say_reads_everything() -> None:
    assert readable(HashingEmbedder(), "咖啡") == 1.0


@pytest.mark.parametrize(("query", "expected"), [("咖啡", 0), ("ส้มตำ", 1), ("模型", 2)])
async def test_a_query_the_model_cannot_read_is_searched_by_its_words(query: str, expected: int) -> None:
    assert readable(OnnxMiniLMEmbedder(), query) < MIN_READABLE
    async with mnemex.open_runtime(mnemex.Config(data_dir=None)) as rt:
        scope = rt.scope(user_id="u", app_name="languages")
        await scope.remember_many(MEMORIES)
        result = await scope.search(query)
        assert result.mode == "fulltext"
        assert [hit.memory.content for hit in result.hits] == [MEMORIES[expected]]
        # vector search, asked for by name, still runs (and its cosines mean little)
        assert (await scope.search(query, mode="vector", min_score=None)).mode == "vector"


async def test_a_query_the_model_reads_stays_hybrid() -> None:
    async with mnemex.open_runtime(mnemex.Config(data_dir=None)) as rt:
        scope = rt.scope(user_id="u", app_name="languages")
        await scope.remember_many(MEMORIES)
        result = await scope.search("where does my sister live?")
        assert result.mode == "hybrid"
        assert result.hits[0].memory.content == "My sister lives in Lisbon"
