"""Documents into chunks: media types told apart, text decoded, PDF pages read with
their numbers (a PDF written by the test), images read by OCR (an image drawn by
the test), Markdown cut at its headings, every chunk within its limits; then
through a real runtime: ingest, search, progress, re-ingest as a no-op, restart,
extraction attributed to the document, forget."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from waiting import eventually

import mnemex
from mnemex.knowledge.chunks import Chunk, chunk_pages, title_of
from mnemex.knowledge.documents import Page, ReadSettings, has_ocr, media_type_of, open_document
from mnemex.persistence.snapshot import sidecar_bytes
from mnemex.testing import FakeLLM, text_pdf

OCR_MISSING = ("OCR is not installed here (pip install 'mnemex[ocr]' and apt-get install tesseract-ocr): "
               "the image tests need the tesseract program")
needs_ocr = pytest.mark.skipif(not has_ocr(), reason=OCR_MISSING)
try:
    import pypdfium2  # noqa: F401
except ImportError:  # pragma: no cover - the test extra installs it
    HAS_PDF = False
else:
    HAS_PDF = True
needs_pdf = pytest.mark.skipif(not HAS_PDF, reason="pypdfium2 is not installed: pip install 'mnemex[documents]'")


def campaign_pdf(pages: int = 4, lines: int = 40) -> bytes:
    """A PDF whose every line names its page: ``p<n>`` and ``Page <n>``."""
    return text_pdf([[f"Page {n} line {i}: the p{n} chronicle tells of tower p{n} and its wizard."
                      for i in range(lines)] for n in range(1, pages + 1)], title="Chronicle")


def pages_named(text: str) -> set[int]:
    return {int(n) for n in re.findall(r"\bp(\d+)\b", text)}


def drawn_text(text_lines: list[str], fmt: str = "PNG") -> bytes:
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=40)
    image = Image.new("RGB", (1100, 90 * len(text_lines) + 40), "white")
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(text_lines):
        draw.text((30, 30 + 90 * i), line, fill="black", font=font)
    out = io.BytesIO()
    image.save(out, fmt)
    return out.getvalue()


# -- media types and text -------------------------------------------------------------------------
@pytest.mark.parametrize(("data", "given", "name", "expected"), [
    (b"%PDF-1.4\n...", None, None, ("application/pdf", None)),
    (b"\x89PNG\r\n\x1a\n....", None, None, ("image/png", None)),
    (b"\xff\xd8\xff\xe0....", None, None, ("image/jpeg", None)),
    (b"# Title\n\nSome text.", None, None, ("text/markdown", None)),
    (b"Just some text.", None, None, ("text/plain", None)),
    (b"Just some text.", None, "notes.md", ("text/markdown", None)),
    (b"# not a heading: a comment", None, "script.txt", ("text/plain", None)),
    (b"x", "Text/Markdown", None, ("text/markdown", None)),
    (b"x", "text/plain; charset=ISO-8859-1", None, ("text/plain", "iso-8859-1")),
    (b"x", "image/jpg", None, ("image/jpeg", None)),
])
def test_the_media_type_is_the_one_given_else_told_from_the_bytes_and_name(
        data: bytes, given: str | None, name: str | None, expected: tuple[str, str | None]) -> None:
    assert media_type_of(data, given, name) == expected


def test_an_unsupported_media_type_is_refused_by_name() -> None:
    with pytest.raises(mnemex.InvalidInput, match=r"media type 'application/msword' is not one mnemex reads; "
                                                  r"it reads text/plain, text/markdown") as error:
        media_type_of(b"x", "application/msword")
    assert error.value.field == "media_type"
    with pytest.raises(mnemex.InvalidInput, match="cannot tell the media type of 4 bytes"):
        media_type_of(b"\x00\xff\xfe\x01")


@pytest.mark.parametrize(("data", "charset", "text"), [
    ("Café crème".encode(), None, "Café crème"),
    (b"\xef\xbb\xbfwith a BOM", None, "with a BOM"),
    ("UTF-16 text".encode("utf-16"), None, "UTF-16 text"),
    ("Café".encode("latin-1"), "latin-1", "Café"),
    (b"lines\r\nin CRLF\r\n", None, "lines\nin CRLF\n"),
])
def test_text_is_decoded_by_its_charset_or_its_byte_order_mark(data: bytes, charset: str | None,
                                                               text: str) -> None:
    assert open_document(data, "text/plain", charset).read(0, 1) == [Page(None, text)]


def test_text_that_is_not_utf8_says_how_to_name_its_charset() -> None:
    with pytest.raises(mnemex.InvalidInput, match=r"not utf-8 text \(byte 3 is not valid\); name its charset"):
        open_document("Café".encode("latin-1"), "text/plain")


# -- PDF -------------------------------------------------------------------------------------------
@needs_pdf
def test_a_pdf_made_here_reads_page_by_page_with_its_title() -> None:
    reader = open_document(campaign_pdf(pages=3, lines=2), "application/pdf")
    try:
        assert (reader.pages, reader.title) == (3, "Chronicle")
        pages = reader.read(0, 2) + reader.read(2, 3)
    finally:
        reader.close()
    assert [page.number for page in pages] == [1, 2, 3]
    for page in pages:
        assert pages_named(page.text) == {page.number}
        assert page.text.startswith(f"Page {page.number} line 0: the p{page.number} chronicle")


@needs_pdf
def test_pdf_chunks_carry_the_pages_their_text_comes_from() -> None:
    reader = open_document(campaign_pdf(pages=4, lines=40), "application/pdf")
    pages = reader.read(0, reader.pages)
    reader.close()
    chunks = chunk_pages(pages, max_chars=800, overlap=100)
    assert len(chunks) > 8
    for chunk in chunks:
        named = pages_named(chunk.text)
        assert chunk.pages in ((min(named),), (min(named), max(named))), chunk
        assert len(chunk.pages) == 1 or chunk.pages[1] == chunk.pages[0] + 1
    assert {page for chunk in chunks for page in chunk.pages} == {1, 2, 3, 4}


@needs_pdf
def test_a_pdf_that_is_not_one_is_refused_naming_pdf() -> None:
    with pytest.raises(mnemex.InvalidInput, match="the PDF could not be read") as error:
        open_document(b"%PDF-1.4 but then nothing", "application/pdf")
    assert error.value.field == "content"


def test_without_pypdfium2_a_pdf_names_the_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pypdfium2", None)
    with pytest.raises(mnemex.InvalidInput, match=r"application/pdf needs pypdfium2: pip install "
                                                  r"'mnemex\[documents\]'"):
        open_document(b"%PDF-1.4", "application/pdf")


def scanned_pdf(line: str) -> bytes:
    """A one-page PDF whose page is an image (a scan), made with pypdfium2."""
    import pypdfium2 as pdfium
    from PIL import Image

    image = Image.open(io.BytesIO(drawn_text([line])))
    pdf = pdfium.PdfDocument.new()
    page = pdf.new_page(image.width * 72 / 150, image.height * 72 / 150)
    picture = pdfium.PdfImage.new(pdf)
    picture.set_bitmap(pdfium.PdfBitmap.from_pil(image))
    width, height = page.get_size()
    picture.set_matrix(pdfium.PdfMatrix().scale(width, height))
    page.insert_obj(picture)
    page.gen_content()
    out = io.BytesIO()
    pdf.save(out)
    return out.getvalue()


@needs_pdf
@needs_ocr
def test_a_scanned_pdf_page_is_read_by_ocr_or_left_out_with_a_warning() -> None:
    data = scanned_pdf("The scanned page speaks of dragons.")
    read = open_document(data, "application/pdf")
    assert "dragons" in read.read(0, 1)[0].text and read.warnings == []
    unread = open_document(data, "application/pdf", settings=ReadSettings(ocr_pdf_pages=False))
    assert unread.read(0, 1) == [Page(1, "")]
    assert unread.warnings == ["1 page(s) have no text layer (scans?) and were left empty because OCR is off "
                               "(knowledge.ocr_pdf_pages): page 1"]


# -- images ----------------------------------------------------------------------------------------
@needs_ocr
@pytest.mark.parametrize(("fmt", "media_type"), [("PNG", "image/png"), ("JPEG", "image/jpeg")])
def test_an_image_with_printed_text_reads_as_that_text(fmt: str, media_type: str) -> None:
    data = drawn_text(["The wizard Gandros owes us", "a favour for the tower."], fmt)
    assert media_type_of(data) == (media_type, None)
    [page] = open_document(data, media_type).read(0, 1)
    words = set(re.findall(r"\w+", page.text.lower()))
    assert {"wizard", "gandros", "owes", "favour", "tower"} <= words, page.text


@needs_ocr
def test_bytes_that_are_no_image_are_refused_naming_the_media_type() -> None:
    with pytest.raises(mnemex.InvalidInput, match="the image/png image could not be read"):
        open_document(b"\x89PNG\r\n\x1a\nnot really", "image/png").read(0, 1)


def test_without_pytesseract_an_image_names_the_extra_and_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pytesseract", None)
    with pytest.raises(mnemex.InvalidInput, match=r"reading images needs OCR: pip install 'mnemex\[ocr\]' "
                                                  r"\(pytesseract and Pillow\), and apt-get install tesseract-ocr"):
        open_document(b"\x89PNG\r\n\x1a\n", "image/png")


def test_without_the_tesseract_program_an_image_names_the_debian_package(monkeypatch: pytest.MonkeyPatch) -> None:
    pytesseract = pytest.importorskip("pytesseract", reason="pytesseract is not installed: pip install "
                                                            "'mnemex[ocr]'")
    monkeypatch.setattr(pytesseract.pytesseract, "tesseract_cmd", "/nonexistent/tesseract")
    with pytest.raises(mnemex.InvalidInput, match="needs the tesseract program, which is not installed: "
                                                  "apt-get install tesseract-ocr"):
        open_document(b"\x89PNG\r\n\x1a\n", "image/png")


# -- chunks ----------------------------------------------------------------------------------------
GUIDE = """---
title: The Campaign Guide
---
# Gandros

Gandros is a wizard of the tower of Ash. He trades in favours.

## The favour

We rescued him from the goblins, so he owes us a favour.

```markdown
# a heading inside code is code
```

# Places

The tower of Ash stands north of the river.

""" + "\n\n".join(f"The road passes mill {i}, where the miller sells bread and ale to travellers." for i in
                  range(30)) + """

## The north

Snow, wolves and a frozen lake.
"""


def test_markdown_chunks_never_straddle_a_top_level_heading_and_keep_their_heading_path() -> None:
    chunks = chunk_pages([Page(None, GUIDE)], markdown=True, max_chars=400, overlap=80)
    for chunk in chunks:
        prose = re.sub(r"```.*?```", "", chunk.text, flags=re.S)
        tops = [line for line in prose.split("\n") if re.match(r"# \w", line)]
        assert tops in ([], [chunk.text.split("\n")[0]]), chunk  # at most one, and only at its start
        assert not chunk.text.rstrip().split("\n")[-1].startswith("#") or chunk.text.count("\n") == 0
    by_start = {chunk.text.split("\n")[0]: chunk for chunk in chunks}
    assert by_start["# Gandros"].headings == ("Gandros",)
    assert "## The favour" in by_start["# Gandros"].text  # a short section heads on in the same chunk
    assert by_start["# Places"].headings == ("Places",)
    assert any(chunk.headings == ("Places", "The north") for chunk in chunks)
    assert any("# a heading inside code is code" in chunk.text and chunk.headings[0] == "Gandros"
               for chunk in chunks)
    assert not any(chunk.headings and chunk.headings[-1] == "a heading inside code is code" for chunk in chunks)
    assert "title: The Campaign Guide" not in "".join(chunk.text for chunk in chunks)
    assert title_of([Page(None, GUIDE)], markdown=True) == "The Campaign Guide"
    assert title_of([Page(None, "Intro\n\n# First\n\n# Second")], markdown=True) == "First"
    assert title_of([Page(None, "# First")], markdown=False) is None


def test_a_full_chunk_hands_its_last_sentences_to_the_next_but_never_across_a_heading() -> None:
    chunks = chunk_pages([Page(None, GUIDE)], markdown=True, max_chars=400, overlap=100)
    mills = [chunk for chunk in chunks if chunk.headings == ("Places",)]
    assert len(mills) >= 3
    for before, after in zip(mills, mills[1:], strict=False):
        first_sentence = after.text.split("\n\n")[0]
        assert first_sentence in before.text and len(first_sentence) <= 100
    north = next(chunk for chunk in chunks if chunk.headings == ("Places", "The north"))
    assert north.text.startswith("## The north")


def test_a_long_paragraph_is_cut_at_sentences_then_words_within_the_limits() -> None:
    sentences = " ".join(f"Sentence {i} says something about dragons." for i in range(60))
    unbroken = "x" * 1000
    chunks = chunk_pages([Page(None, f"{sentences}\n\n{unbroken}")], max_chars=200, overlap=0)
    assert all(len(chunk.text) <= 200 for chunk in chunks)
    assert [chunk.index for chunk in chunks] == list(range(len(chunks)))
    texts = [chunk.text for chunk in chunks]
    assert all(text.endswith("dragons.") for text in texts if "Sentence" in text)
    assert "".join(text for text in texts if set(text) == {"x"}) == unbroken


def test_chunks_stay_within_the_memory_byte_limit_whatever_the_script() -> None:
    text = "。".join("猫が好きです" * 20 for _ in range(20))
    chunks = chunk_pages([Page(None, text)], max_chars=800, overlap=50, max_bytes=600)
    assert chunks and all(len(chunk.text.encode()) <= 600 for chunk in chunks)
    assert all(len(chunk.text) <= 800 for chunk in chunks)


def test_an_empty_document_has_no_chunks_and_bad_settings_are_refused() -> None:
    assert chunk_pages([Page(None, "  \n\n \n")]) == []
    with pytest.raises(mnemex.InvalidInput, match="overlap is 500; it must be from 0 to half a chunk"):
        chunk_pages([Page(None, "x")], max_chars=800, overlap=500)


WORD = st.text(alphabet="abcdefghij", min_size=1, max_size=30)
PARAGRAPH = st.lists(WORD, min_size=1, max_size=60)


@settings(max_examples=60, deadline=None)
@given(st.lists(PARAGRAPH, min_size=1, max_size=12), st.integers(40, 300), st.integers(0, 20))
def test_chunking_keeps_every_word_in_order_within_the_limit(paragraphs: list[list[str]], max_chars: int,
                                                             overlap: int) -> None:
    counter = iter(range(10_000))  # each word once (and shorter than a chunk): the reading back is unique
    text = "\n\n".join(" ".join(f"{word}{next(counter)}" for word in words) for words in paragraphs)
    chunks = chunk_pages([Page(None, text)], max_chars=max_chars, overlap=overlap)
    assert all(0 < len(chunk.text) <= max_chars for chunk in chunks)
    found: list[str] = []
    for chunk in chunks:  # each chunk's words, minus what it repeats of the one before
        own = chunk.text.split()
        shared = next(n for n in range(min(len(own), len(found)), -1, -1) if found[len(found) - n:] == own[:n])
        assert shared <= overlap
        found += own[shared:]
    assert found == text.split()


def test_chunks_are_plain_data() -> None:
    assert Chunk(0, "x").pages == () and Chunk(1, "y", (2, 3), ("A",)).headings == ("A",)


# -- through a runtime -----------------------------------------------------------------------------

def memory_config(tmp_path: Path | None = None, **more: Any) -> mnemex.Config:
    return mnemex.Config(data_dir=str(tmp_path / "data") if tmp_path else None, embedder="hashing", **more)


@needs_pdf
@pytest.mark.trio
async def test_an_ingested_pdf_is_searchable_at_once_with_its_pages(tmp_path: Path) -> None:
    data = campaign_pdf(pages=4, lines=40)
    events: list[tuple[str, int, int]] = []
    async with mnemex.open_runtime(memory_config()) as rt:
        scope = rt.scope(user_id="gm", app_name="campaign")
        report = await scope.ingest(data, metadata={"campaign": "ash"}, extract=False,
                                    progress=lambda e: events.append((e.stage, e.done, e.total)))
        document = report.document
        assert report.status == "ingested" and report.extraction == "off" and report.warnings == []
        assert (document.media_type, document.title, document.pages, document.size) == (
            "application/pdf", "Chronicle", 4, len(data))
        assert document.chunks == len(report.ids) == report.stored > 8
        assert set(report.seconds) == {"read", "chunk", "embed", "store", "extract", "total"}
        assert events[0] == ("read", 4, 4) and events[-1] == ("done", document.chunks, document.chunks)
        assert [stage for stage, _, _ in events] == ["read", "chunk", "embed", "store", "done"]
        for position, memory_id in enumerate(report.ids):
            memory = await scope.get(memory_id)
            meta = memory.metadata
            assert memory.kind == "document_chunk" and memory.session_id == f"doc:{document.id}"
            assert memory.sources == (mnemex.memories.protocol.SourceRef(document=document.id, chunk=position),)
            assert (meta["document_id"], meta["chunk"], meta["campaign"]) == (document.id, position, "ash")
            named = pages_named(memory.content)
            assert meta["page"] == min(named) and meta.get("page_end", meta["page"]) == max(named)
        hits = (await scope.search("tower p3 chronicle", top_k=3, mode="fulltext")).hits
        assert hits and hits[0].memory.metadata["page"] <= 3 <= hits[0].memory.metadata.get("page_end", 3)
        on_page_2 = await scope.count({"metadata": {"page": 2}})
        assert on_page_2 >= 2
        assert (await scope.documents())[0].memories == document.chunks


@pytest.mark.trio
async def test_ingesting_the_same_bytes_again_reads_and_stores_nothing(tmp_path: Path) -> None:
    text = b"# Notes\n\nThe dragon sleeps under the hill.\n\nThe hill is north of Ash.\n"
    async with mnemex.open_runtime(memory_config(tmp_path)) as rt:
        scope = rt.scope(user_id="gm", app_name="campaign")
        first = await scope.ingest(text, extract=False)
        stats = await scope.stats()
        again = await scope.ingest(text, extract=False)
        assert (again.status, again.ids, again.stored, again.document) == ("unchanged", [], 0, first.document)
        assert "read" not in again.seconds
        assert await scope.stats() == stats
        named = await scope.ingest(text, document_id="notes", title="My notes", extract=False)
        assert named.status == "ingested" and named.stored == 0  # its chunks' text is stored already
        assert [d.document.id for d in await scope.documents()] == [first.document.id, "notes"]
    async with mnemex.open_runtime(memory_config(tmp_path)) as rt:  # restored from the snapshot
        scope = rt.scope(user_id="gm", app_name="campaign")
        assert [d.document.title for d in await scope.documents()] == ["Notes", "My notes"]
        assert (await scope.ingest(text, extract=False)).status == "unchanged"


@pytest.mark.trio
async def test_forgetting_a_document_keeps_the_text_another_document_or_the_user_holds() -> None:
    async with mnemex.open_runtime(memory_config(knowledge_chunk_chars=100, knowledge_chunk_overlap=0)) as rt:
        scope = rt.scope(user_id="gm", app_name="campaign")
        mine = await scope.remember("The hill north of the town of Ash hides a cave of bones.")
        old = await scope.ingest(b"The old dragon sleeps under the hill of Ash, dreaming.\n\n"
                                 b"The hill north of the town of Ash hides a cave of bones.", extract=False)
        new = await scope.ingest(b"The old dragon sleeps under the hill of Ash, dreaming.\n\n"
                                 b"The old dragon woke up at dawn and flew to the south.", extract=False)
        assert (old.stored, new.stored) == (1, 1) and new.ids[0] == old.ids[0]
        shared = await scope.get(new.ids[0])
        assert [(s.document, s.chunk) for s in shared.sources] == [(old.document.id, 0), (new.document.id, 0)]
        assert await scope.forget_document(old.document.id) == []
        contents = sorted(m.content for m in (await scope.memories()).memories)
        assert contents == ["The hill north of the town of Ash hides a cave of bones.",
                            "The old dragon sleeps under the hill of Ash, dreaming.",
                            "The old dragon woke up at dawn and flew to the south."]
        assert (await scope.get(mine)).sources == ()
        [status] = await scope.documents()
        assert (status.document.id, status.memories) == (new.document.id, 2)
        assert sorted(await scope.forget_document(new.document.id)) == sorted(new.ids)
        assert [m.id for m in (await scope.memories()).memories] == [mine]


@pytest.mark.trio
async def test_bad_documents_are_refused_and_change_nothing(tmp_path: Path) -> None:
    async with mnemex.open_runtime(memory_config()) as rt:
        scope = rt.scope(user_id="gm", app_name="campaign")
        with pytest.raises(mnemex.InvalidInput, match="media type 'application/zip' is not one mnemex reads"):
            await scope.ingest(b"PK\x03\x04", "application/zip")
        with pytest.raises(mnemex.NotFound, match=r"no file '.*missing.pdf'"):
            await scope.ingest(tmp_path / "missing.pdf")
        with pytest.raises(mnemex.NotFound, match=r"to ingest text itself, pass its bytes"):
            await scope.ingest("A text\nthat is not a path")
        with pytest.raises(mnemex.InvalidInput, match="source must be a file's path or the document's bytes"):
            await scope.ingest(42)  # type: ignore[arg-type]
        assert await scope.count() == 0 and await scope.documents() == []
    async with mnemex.open_runtime(memory_config(knowledge_max_document_bytes=10)) as small:
        with pytest.raises(mnemex.TooLarge, match=r"the limit is 10 \(config.knowledge.max_document_bytes\)"):
            await small.scope(user_id="gm", app_name="x").ingest(b"more than ten bytes")


@pytest.mark.trio
async def test_a_file_is_read_from_its_path_and_named_by_it(tmp_path: Path) -> None:
    path = tmp_path / "session-notes.md"
    path.write_text("The party reached the tower.\n\n## Loot\n\nA silver key.\n")
    async with mnemex.open_runtime(memory_config()) as rt:
        report = await rt.scope(user_id="gm", app_name="campaign").ingest(path, extract=False)
        assert (report.document.media_type, report.document.title) == ("text/markdown", "session-notes.md")


@pytest.mark.trio
async def test_the_rules_extractor_reads_no_facts_from_a_document(tmp_path: Path) -> None:
    # a document's first person is its author's, not the user's: only an LLM extracts from documents
    async with mnemex.open_runtime(memory_config()) as rt:
        scope = rt.scope(user_id="gm", app_name="campaign")
        report = await scope.ingest(b"I live in Lisbon and I work as a nurse.", "text/plain", extract=False)
        done = await scope.extract_document(report.document.id)
        assert (done.status, done.added, done.extractor) == ("committed", [], "rules")
        [status] = await scope.documents()
        assert (status.extracted, status.extraction) == (1, "idle")
        assert await scope.count() == 1


@pytest.fixture
def llm() -> Any:
    with FakeLLM() as server:
        yield server


@pytest.mark.trio
async def test_facts_extracted_from_a_document_name_it_and_go_with_it(tmp_path: Path, llm: FakeLLM) -> None:
    def favour_is_new(request: dict[str, Any]) -> bool:  # not when it is only context of a later job
        return "owes us a favour" in request["messages"][-1]["content"].split("New messages")[-1]

    llm.add(favour_is_new, '{"facts": [{"content": "Gandros owes the party a favour.", "kind": "fact", '
            '"entities": ["Gandros"], "importance": 0.8, "attributed_to": "Gandros", "messages": [1]}]}')
    text = "\n\n".join(["# Gandros", "Gandros is a wizard. " * 30, "He owes us a favour since the goblins.",
                        "# The tower", "The tower of Ash has seven floors. " * 20]).encode()
    config = memory_config(llm_base_url=llm.base_url, llm_model="fake", llm_retries=0, knowledge_max_batch=2,
                           knowledge_chunk_chars=400, knowledge_chunk_overlap=0)
    async with mnemex.open_runtime(config) as rt:
        scope = rt.scope(user_id="gm", app_name="campaign")
        report = await scope.ingest(text, "text/markdown")
        chunks = report.document.chunks
        assert chunks >= 4 and report.extraction == "in_flight"

        async def covered() -> bool:
            [status] = await scope.documents()
            return status.extracted == chunks and status.extraction == "idle"

        await eventually(covered, what="every chunk extracted, job after job (max_batch 2)", timeout=20)
        assert llm.calls == (chunks + 1) // 2
        [fact] = (await scope.memories({"kind": "fact"})).memories
        assert fact.content == "Gandros owes the party a favour."
        assert fact.session_id == f"doc:{report.document.id}" and fact.extractor == "llm:fake:x3"
        [source] = fact.sources
        assert (source.document, source.chunk, source.first, source.last) == (report.document.id, 1, 1, 1)
        prompt = llm.requests[0]["messages"][1]["content"]
        assert "#1 document (Gandros)" in prompt
        gone = await scope.forget_document(report.document.id)
        assert fact.id in gone and len(gone) == chunks + 1
        assert await scope.count() == 0 and await scope.documents() == []
        assert await scope.forget_document(report.document.id) == []


# -- the scope, sans-io: the journaled commands replay to the same state -------------------------------
def scope_memory() -> Any:
    from mnemex.memories.behaviour import ScopeMemory, ScopeSettings

    return ScopeMemory(("campaign", "gm"), ScopeSettings())


def ingest_command(document_id: str, texts: list[str], now: float = 100.0) -> Any:
    from mnemex.memories.protocol import DocumentInfo, IngestDocument, NewMemory

    info = DocumentInfo(id=document_id, media_type="text/plain", title="T", size=10, pages=1,
                        chunks=len(texts), ingested_at=now)
    memories = [NewMemory(id=f"{document_id}-{i:03d}", content=text, kind="document_chunk",
                          session_id=f"doc:{document_id}", metadata={"chunk": i, "document_id": document_id})
                for i, text in enumerate(texts)]
    return IngestDocument(document=info, memories=memories, now=now)


def replies(memory: Any, command: Any) -> Any:
    from mnemex.effects import Step

    out = memory.handle(command)
    return out.reply if isinstance(out, Step) else out


def test_document_commands_are_journaled_and_replay_to_the_same_scope() -> None:
    # d1 and d2 share a chunk's text: one memory, named by both; forgetting d1 keeps it for d2
    from mnemex.effects import Image, Step
    from mnemex.memories.behaviour import ScopeMemory, ScopeSettings, is_scope_write, scope_codec
    from mnemex.memories.protocol import ForgetDocument, GetDocuments, ListMemories

    live = scope_memory()
    commands = [ingest_command("d1", ["The tower of Ash.", "The wizard Gandros."]),
                ingest_command("d2", ["The river Umber.", "The wizard Gandros."], now=101.0),
                ForgetDocument(document_id="d1", now=102.0)]
    for command in commands:
        assert is_scope_write(command)
        replies(live, command)
    again = live.handle(commands[1])
    assert isinstance(again, Step) and again.unchanged and again.reply.unchanged  # held: not journaled
    replayed = scope_memory()
    replayed.replay(scope_codec.decode(scope_codec.encode(command)) for command in commands)
    for memory in (live, replayed):
        [status] = replies(memory, GetDocuments())
        assert (status.document.id, status.memories) == ("d2", 2)  # the chunk both held stays, d2's
        page = replies(memory, ListMemories())
        assert sorted(m.content for m in page.memories) == ["The river Umber.", "The wizard Gandros."]
        assert sorted((s.document, s.chunk) for m in page.memories for s in m.sources) == [("d2", 0), ("d2", 1)]
    data = live.snapshot()
    records = data.records() if callable(data.records) else data.records
    sidecars = data.sidecars() if callable(data.sidecars) else data.sidecars or {}
    blobs = {name: sidecar_bytes(blob) for name, blob in sidecars.items()}
    restored = ScopeMemory.restore(("campaign", "gm"), Image(list(records), data.extra, blobs),
                                   ScopeSettings())
    assert replies(restored, GetDocuments()) == replies(live, GetDocuments())


def test_a_chunk_that_does_not_belong_to_its_document_is_refused_and_changes_nothing() -> None:
    import msgspec

    live = scope_memory()
    command = ingest_command("d1", ["one", "two"])
    wrong = msgspec.structs.replace(command, memories=[command.memories[0],
                                                       msgspec.structs.replace(command.memories[1],
                                                                               session_id="s1")])
    with pytest.raises(mnemex.InvalidInput, match=r"memories\[1\] is not chunk 1 of document 'd1'"):
        live.handle(wrong)
    short = msgspec.structs.replace(command, memories=command.memories[:1])
    with pytest.raises(mnemex.InvalidInput, match="has 2 chunks but the command carries 1 memories"):
        live.handle(short)
    assert len(live) == 0 and len(live.documents) == 0


def test_the_blocking_client_ingests_and_lists_documents() -> None:
    with mnemex.Client(memory_config()) as client:
        scope = client.scope(user_id="gm", app_name="campaign")
        report = scope.ingest(b"The party rests at the inn of the Grey Gull.", extract=False)
        assert report.status == "ingested" and report.document.media_type == "text/plain"
        assert [d.document.id for d in scope.documents()] == [report.document.id]
        assert scope.extract_document(report.document.id).status == "committed"
        assert scope.forget_document(report.document.id) == report.ids
