"""Stems are part of what full-text indexes store (sidecars record the tokenizer's
signature, ``stem=snowball-<language>``, not which implementation stemmed). The
compiled Snowball algorithms (PyStemmer, a dependency since issue 17: a scope's
first memories stem every new word) must give exactly the stems of the pure-Python
ones, or an index built by one would be read with the other's query terms."""

from __future__ import annotations

import importlib
import importlib.resources
import random

import pytest

snowballstemmer = pytest.importorskip("snowballstemmer")
Stemmer = pytest.importorskip("Stemmer", reason="PyStemmer is not installed: the pure-Python stemmer is used")

from mnemex.index.tokenizer import _snowball  # noqa: E402


def _pure(language: str) -> object:
    module = importlib.import_module(f"snowballstemmer.{language}_stemmer")
    classes = [value for name, value in vars(module).items()
               if name.endswith("Stemmer") and name != "BaseStemmer" and isinstance(value, type)]
    assert len(classes) == 1, classes
    return classes[0]()


def _english_words() -> list[str]:
    vocab = (importlib.resources.files("mnemex") / "data" / "vocab.txt").read_text(encoding="utf-8")
    return sorted({line for line in vocab.splitlines() if line.isalpha()})[::3]


def test_the_tokenizer_stems_with_the_compiled_algorithms() -> None:
    stem = _snowball("english")
    assert getattr(stem, "__self__", None).__class__ is Stemmer.Stemmer


@pytest.mark.parametrize("language", ["english", "porter", "french", "german", "spanish", "italian",
                                      "portuguese", "dutch", "swedish", "russian", "turkish"])
def test_compiled_and_pure_stems_are_equal(language: str) -> None:
    rng = random.Random(language)
    letters = ("абвгдеёжзийклмнопрстуфхцчшщъыьэюя" if language == "russian"
               else "abcdefghijklmnopqrstuvwxyzéèàùâêîôûçäöüßñáíóúõãåøæœ\u0131şğ")
    words = [*(_english_words() if language in ("english", "porter") else []),
             *("".join(rng.choice(letters) for _ in range(rng.randrange(1, 14))) for _ in range(5000))]
    pure, compiled = _pure(language), _snowball(language)
    differ = [(word, pure.stemWord(word), compiled(word)) for word in words  # type: ignore[attr-defined]
              if pure.stemWord(word) != compiled(word)]  # type: ignore[attr-defined]
    assert not differ, differ[:10]
