"""Documents into text: what a document's bytes say, page by page.

The media types read (``MEDIA_TYPES``):

* ``text/plain`` and ``text/markdown``: UTF-8 (a byte-order mark, or a
  ``charset=`` parameter, says otherwise); one page, numbered None;
* ``application/pdf``: the text layer of each page through pypdfium2 (the
  ``documents`` extra), pages numbered from 1; a page without one (a scan) is
  rendered and read by OCR when ``ocr_pdf_pages`` is on and OCR is installed,
  else it stays empty and a warning says so;
* ``image/png`` and ``image/jpeg``: one page read by OCR, through Tesseract (the
  ``ocr`` extra, pytesseract and Pillow, plus the ``tesseract`` program: Debian's
  ``tesseract-ocr`` package and one ``tesseract-ocr-<lang>`` per extra language).

``media_type_of`` names a document's type from what the caller says, else from
its first bytes and its file name. ``open_document`` returns a
``DocumentReader``: ``pages`` to read, ``read(first, upto)`` reading that many
(slow for a PDF or an image: call it in a worker thread, a few pages at a time,
to report progress between calls), ``title`` when the document names one, and
``close``. A missing engine is an InvalidInput naming the extra or package to
install; bytes an engine cannot read are an InvalidInput naming the media type.

A page's text comes out as paragraphs separated by a blank line, with the lines
of a paragraph kept (text, Markdown) or joined (PDF and OCR, where a line break
is only where the page ended a line; words hyphenated across lines are joined
again). Nothing here keeps state between documents but one lock (PDFium is not
thread-safe, so every call into it holds ``_PDFIUM``) and the tesseract programs
found.
"""

from __future__ import annotations

import codecs
import io
import re
import threading
from collections.abc import Sequence
from typing import Any, Final, Literal

import msgspec

from mnemex.errors import InvalidInput

__all__ = [
    "MEDIA_TYPES",
    "DocumentReader",
    "MediaType",
    "Page",
    "ReadSettings",
    "has_ocr",
    "media_type_of",
    "open_document",
]

MediaType = Literal["text/plain", "text/markdown", "application/pdf", "image/png", "image/jpeg"]
MEDIA_TYPES: Final[tuple[MediaType, ...]] = ("text/plain", "text/markdown", "application/pdf", "image/png",
                                             "image/jpeg")
_ALIASES: Final[dict[str, MediaType]] = {
    "text/x-markdown": "text/markdown", "text/md": "text/markdown", "text/x-md": "text/markdown",
    "image/jpg": "image/jpeg", "image/pjpeg": "image/jpeg", "application/x-pdf": "application/pdf",
}
_SUFFIXES: Final[dict[str, MediaType]] = {
    ".txt": "text/plain", ".text": "text/plain", ".md": "text/markdown", ".markdown": "text/markdown",
    ".pdf": "application/pdf", ".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
}
_PDF_EXTRA: Final = "pip install 'mnemex[documents]' (pypdfium2)"
_OCR_EXTRA: Final = "pip install 'mnemex[ocr]' (pytesseract and Pillow)"
_TESSERACT: Final = "apt-get install tesseract-ocr (Debian's package; brew install tesseract on macOS)"

_PDFIUM: Final = threading.Lock()
_ATX_HEADING: Final = re.compile(r"^ {0,3}#{1,6}[ \t]+\S", re.M)


class Page(msgspec.Struct, frozen=True):
    """The text of one page: ``number`` from 1 for a PDF, None for a document
    without pages (text, Markdown, an image). Paragraphs are separated by a blank
    line."""

    number: int | None
    text: str


class ReadSettings(msgspec.Struct, frozen=True, kw_only=True):
    """How documents are read (``config.knowledge``): Tesseract's ``ocr_languages``
    (``eng``, ``eng+deu``...), the seconds one OCR call may take, and whether PDF
    pages without a text layer are read by OCR."""

    ocr_languages: str = "eng"
    ocr_timeout: float = 120.0
    ocr_pdf_pages: bool = True


# -- media types --------------------------------------------------------------------------------
def media_type_of(data: bytes, given: str | None = None,
                  name: str | None = None) -> tuple[MediaType, str | None]:
    """The document's media type and the charset its ``given`` type names (None:
    none named). Without ``given``, the first bytes tell PDF, PNG and JPEG apart;
    text is Markdown when ``name`` ends in .md/.markdown, or it has a heading line
    (``# ...``) and no other name says otherwise. InvalidInput for a type mnemex
    does not read, or bytes whose type cannot be told."""
    if given is not None:
        if not isinstance(given, str):
            raise InvalidInput(f"media_type must be a string such as 'application/pdf', got "
                               f"{type(given).__name__}", field="media_type")
        essence, _, params = given.partition(";")
        essence = essence.strip().lower()
        chosen: Any = _ALIASES.get(essence, essence)
        if chosen not in MEDIA_TYPES:
            raise InvalidInput(f"media type {given.strip()!r} is not one mnemex reads; it reads "
                               f"{', '.join(MEDIA_TYPES)}", field="media_type")
        return chosen, _charset(params)
    head = data[:1024]
    if b"%PDF-" in head:
        return "application/pdf", None
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png", None
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg", None
    suffix = name[name.rfind("."):].lower() if name and "." in name else ""
    by_name = _SUFFIXES.get(suffix)
    if by_name is not None and by_name.startswith("text/"):
        return by_name, None
    try:
        text = _decoded(data[:65_536], None, cut=True)
    except InvalidInput:
        raise InvalidInput(f"cannot tell the media type of {len(data):,} bytes that are neither text nor "
                           f"PDF, PNG or JPEG; give media_type (mnemex reads {', '.join(MEDIA_TYPES)})",
                           field="media_type") from None
    return ("text/markdown" if _ATX_HEADING.search(text) else "text/plain"), None


def _charset(params: str) -> str | None:
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            return value.strip().strip('"').lower()
    return None


# the longer marks first: UTF-32 LE's starts with UTF-16 LE's
_BOMS: Final = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
                (codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"),
                (codecs.BOM_UTF16_BE, "utf-16"))
_CONTROLS: Final = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _decoded(data: bytes, charset: str | None, *, cut: bool = False) -> str:
    """``data`` as text: the charset named, else the byte-order mark's, else UTF-8.
    ``cut``: ``data`` may end inside a character (a prefix of the document)."""
    encoding = charset
    if encoding is None:
        encoding = next((name for bom, name in _BOMS if data.startswith(bom)), "utf-8")
    try:
        decoder = codecs.getincrementaldecoder(encoding)()
    except LookupError:
        raise InvalidInput(f"charset {charset!r} is not one Python knows", field="media_type") from None
    try:
        text = decoder.decode(data, final=not cut)
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"the document is not {encoding} text (byte {exc.start:,} is not valid); name its "
                           f"charset in the media type (text/plain; charset=latin-1)",
                           field="media_type") from None
    if "\x00" in text[:4096]:
        raise InvalidInput("the document holds NUL characters: it is not text", field="media_type")
    return text.removeprefix("\ufeff")


# -- readers -------------------------------------------------------------------------------------
class DocumentReader:
    """One document being read (see the module doc). Not safe to share between
    threads at once; a PDF's reads take the PDFium lock."""

    pages: int
    title: str | None
    warnings: list[str]

    def read(self, first: int, upto: int) -> list[Page]:
        """The pages [first, upto) (0-based positions)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the reader holds (safe to call twice)."""


class _TextReader(DocumentReader):
    def __init__(self, text: str) -> None:
        self.text = text
        self.pages = 1
        self.title = None
        self.warnings = []

    def read(self, first: int, upto: int) -> list[Page]:
        if first > 0 or upto < 1:
            return []
        text = _CONTROLS.sub("", self.text.replace("\r\n", "\n").replace("\r", "\n"))
        return [Page(None, text)]


class _ImageReader(DocumentReader):
    def __init__(self, data: bytes, media_type: str, settings: ReadSettings) -> None:
        self.data = data
        self.media_type = media_type
        self.settings = settings
        self.pages = 1
        self.title = None
        self.warnings = []
        _ocr_engine()  # refuse at once when OCR is not installed

    def read(self, first: int, upto: int) -> list[Page]:
        if first > 0 or upto < 1:
            return []
        image = _image_of(self.data, self.media_type)
        return [Page(None, _ocr(image, self.settings))]


class _PdfReader(DocumentReader):
    def __init__(self, data: bytes, settings: ReadSettings) -> None:
        pdfium = _pdfium()
        self.settings = settings
        self.warnings = []
        self._scans: list[int] = []
        with _PDFIUM:
            try:
                self.pdf = pdfium.PdfDocument(data)
            except pdfium.PdfiumError as exc:
                detail = str(exc)
                hint = " (it is encrypted: decrypt it first)" if "password" in detail.lower() else ""
                raise InvalidInput(f"the PDF could not be read{hint}: {detail}", field="content") from exc
            try:
                self.pages = len(self.pdf)
                title = self.pdf.get_metadata_dict().get("Title")
            except pdfium.PdfiumError as exc:
                self.pdf.close()
                raise InvalidInput(f"the PDF could not be read: {exc}", field="content") from exc
        self.title = " ".join(title.split())[:300] if isinstance(title, str) and title.strip() else None
        self.ocr: bool | None = None if settings.ocr_pdf_pages else False  # None: not asked yet

    def read(self, first: int, upto: int) -> list[Page]:
        pages: list[Page] = []
        for index in range(max(0, first), min(upto, self.pages)):
            text = self._page_text(index)
            if not text.strip():
                if self.ocr is None:
                    self.ocr = has_ocr()
                if self.ocr:
                    text = _ocr(self._rendered(index), self.settings)
                else:
                    self._scans.append(index + 1)
            pages.append(Page(index + 1, text))
        if upto >= self.pages and self._scans:
            shown = ", ".join(map(str, self._scans[:10])) + (" ..." if len(self._scans) > 10 else "")
            why = ("OCR is off (knowledge.ocr_pdf_pages)" if not self.settings.ocr_pdf_pages
                   else f"OCR is not installed: {_OCR_EXTRA} and {_TESSERACT}")
            self.warnings.append(f"{len(self._scans)} page(s) have no text layer (scans?) and were left "
                                 f"empty because {why}: page {shown}")
            self._scans = []
        return pages

    def _page_text(self, index: int) -> str:
        pdfium = _pdfium()
        with _PDFIUM:
            try:
                page = self.pdf[index]
                try:
                    textpage = page.get_textpage()
                    try:
                        raw = str(textpage.get_text_range())
                    finally:
                        textpage.close()
                finally:
                    page.close()
            except pdfium.PdfiumError as exc:
                raise InvalidInput(f"page {index + 1} of the PDF could not be read: {exc}",
                                   field="content") from exc
        # PDFium marks a hyphen it found at a line's end with one of these
        for mark in ("\x02", "\ufffe", "\u00ad"):
            raw = raw.replace(mark, "-")
        return _paragraphs(raw.splitlines())

    def _rendered(self, index: int) -> Any:
        pdfium = _pdfium()
        with _PDFIUM:
            try:
                page = self.pdf[index]
                try:
                    return page.render(scale=300 / 72).to_pil()
                finally:
                    page.close()
            except pdfium.PdfiumError as exc:
                raise InvalidInput(f"page {index + 1} of the PDF could not be rendered: {exc}",
                                   field="content") from exc

    def close(self) -> None:
        pdf = getattr(self, "pdf", None)
        if pdf is not None:
            with _PDFIUM:
                pdf.close()
            self.pdf = None


def open_document(data: bytes, media_type: MediaType, charset: str | None = None,
                  settings: ReadSettings | None = None) -> DocumentReader:
    """A reader of ``data`` as ``media_type`` (see the module doc). InvalidInput when
    the engine the type needs is missing or the bytes do not read as that type."""
    settings = settings if settings is not None else ReadSettings()
    if media_type in ("text/plain", "text/markdown"):
        return _TextReader(_decoded(data, charset))
    if media_type == "application/pdf":
        return _PdfReader(data, settings)
    if media_type in ("image/png", "image/jpeg"):
        return _ImageReader(data, media_type, settings)
    raise InvalidInput(f"media type {media_type!r} is not one mnemex reads; it reads "
                       f"{', '.join(MEDIA_TYPES)}", field="media_type")


# -- text from lines ------------------------------------------------------------------------------
_SENTENCE_END: Final = (".", "!", "?", ":", '"', "\u201d", ")", "\u3002", "\uff01", "\uff1f")


def _paragraphs(lines: Sequence[str]) -> str:
    """Lines as a page laid them out (PDF, OCR) into paragraphs: a blank line ends
    one, and so does a line that ends a sentence well short of the page's width;
    the other lines are joined with a space, or without the hyphen when a word was
    split across them."""
    cleaned = [_CONTROLS.sub("", " ".join(line.split())) for line in lines]
    width = max((len(line) for line in cleaned), default=0)
    paragraphs: list[str] = []
    current = ""
    for line in cleaned:
        if not line:
            if current:
                paragraphs.append(current)
                current = ""
            continue
        if not current:
            current = line
        elif current.endswith("-") and len(current) > 1 and current[-2].isalpha() and line[:1].islower():
            current = current[:-1] + line
        else:
            current = f"{current} {line}"
        if line.endswith(_SENTENCE_END) and len(line) < 0.75 * width:
            paragraphs.append(current)
            current = ""
    if current:
        paragraphs.append(current)
    return "\n\n".join(paragraphs)


# -- engines ---------------------------------------------------------------------------------------
def _pdfium() -> Any:
    try:
        import pypdfium2
    except ImportError:
        raise InvalidInput(f"reading application/pdf needs pypdfium2: {_PDF_EXTRA}",
                           field="media_type") from None
    return pypdfium2


def _ocr_engine() -> Any:
    """pytesseract, once it, Pillow and the tesseract program are all there (the
    program is looked for once per path it is called by; a missing one again each
    time, so installing it needs no restart)."""
    try:
        import PIL.Image  # noqa: F401
        import pytesseract
    except ImportError:
        raise InvalidInput(f"reading images needs OCR: {_OCR_EXTRA}, and {_TESSERACT}",
                           field="media_type") from None
    command = str(pytesseract.pytesseract.tesseract_cmd)
    if command not in _TESSERACT_FOUND:
        try:
            pytesseract.get_tesseract_version()
        except (pytesseract.TesseractNotFoundError, OSError):
            raise InvalidInput(f"reading images needs the tesseract program, which is not installed: "
                               f"{_TESSERACT}", field="media_type") from None
        _TESSERACT_FOUND.add(command)
    return pytesseract


_TESSERACT_FOUND: set[str] = set()


def has_ocr() -> bool:
    """Whether images can be read here (pytesseract, Pillow and tesseract installed)."""
    try:
        _ocr_engine()
    except InvalidInput:
        return False
    return True


def _image_of(data: bytes, media_type: str) -> Any:
    import warnings

    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
            image.load()
    except (UnidentifiedImageError, Image.DecompressionBombWarning, Image.DecompressionBombError, OSError,
            ValueError, SyntaxError) as exc:
        raise InvalidInput(f"the {media_type} image could not be read: {exc}", field="content") from exc
    upright: Any = ImageOps.exif_transpose(image) or image
    return upright if upright.mode in ("L", "RGB") else upright.convert("RGB")


def _ocr(image: Any, settings: ReadSettings) -> str:
    pytesseract = _ocr_engine()
    try:
        text = pytesseract.image_to_string(image, lang=settings.ocr_languages, timeout=settings.ocr_timeout)
    except pytesseract.TesseractError as exc:
        detail = " ".join(str(exc.message).split())[:300]
        if "language" in detail.lower() or "traineddata" in detail.lower():
            raise InvalidInput(f"tesseract has no data for {settings.ocr_languages!r} "
                               f"(knowledge.ocr_languages): install tesseract-ocr-<lang> for each language; "
                               f"{detail}", field="ocr_languages") from exc
        raise InvalidInput(f"tesseract could not read the image: {detail}", field="content") from exc
    except RuntimeError as exc:  # pytesseract's timeout
        raise InvalidInput(f"OCR took longer than {settings.ocr_timeout:g} s (knowledge.ocr_timeout): {exc}",
                           field="content") from exc
    return _paragraphs(str(text).splitlines())
