"""Reading a damaged SQLite journal page by page (`rollmux journal check|repair` on a file whose
pages are torn, truncated or overwritten).

SQLite refuses a file whose header or b-tree is damaged, and a query stops at the first bad
page. Each row of a table still lives whole in one leaf page (and, when long, its overflow
chain), so `scan_pages` reads every table-leaf cell of every page directly from the file
format (https://sqlite.org/fileformat2.html), ignoring the header's page count, the interior
pages and the schema: a damaged page costs only the rows stored in it. `first_damage` names
the first bad page from SQLite's own integrity check (or the header, or the truncation).
"""

from __future__ import annotations

import sqlite3
import struct
from dataclasses import dataclass
from pathlib import Path

HEADER = b"SQLite format 3\x00"
TABLE_LEAF = 0x0D


@dataclass(frozen=True)
class Row:
    """One table-leaf cell: its rowid, its column values and the page it was read from."""

    rowid: int
    values: tuple
    page: int


def page_size(data: bytes) -> int:
    """The page size the header gives, or 4096 (SQLite's default) when the header is damaged."""
    if data[:16] == HEADER and len(data) >= 100:
        size = struct.unpack(">H", data[16:18])[0]
        size = 65536 if size == 1 else size
        if size >= 512 and size & (size - 1) == 0:
            return size
    return 4096


def first_damage(path: Path) -> str | None:
    """One line naming the first damaged page of the file at `path`, or None if SQLite finds none."""
    data = path.read_bytes()
    if data[:16] != HEADER:
        return "page 1 (the file header) is damaged: not an SQLite header"
    size = page_size(data)
    pages = struct.unpack(">I", data[28:32])[0]
    if len(data) % size or (pages and len(data) < pages * size):
        return (f"the file is truncated: {len(data)} bytes, the header counts {pages} pages of {size} "
                f"(page {len(data) // size + 1} onwards is missing)")
    try:
        conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
        try:
            problems = [r[0] for r in conn.execute("PRAGMA integrity_check(20)")]
        finally:
            conn.close()
    except sqlite3.Error as exc:
        zeroed = next((n for n in range(1, len(data) // size + 1)
                       if not any(data[(n - 1) * size:n * size])), None)
        where = f"page {zeroed} is all zeroes" if zeroed else "page 1 (the schema) or a page it leads to is damaged"
        return f"{where}: SQLite cannot read the file ({exc})"
    if problems == ["ok"]:
        return None
    lines = "\n".join(problems).splitlines()
    detail = next((line for line in lines if "page" in line.lower() and not line.startswith("***")), lines[-1])
    return f"SQLite's integrity check: {detail.strip()}"


def scan_pages(data: bytes) -> list[Row]:
    """Every readable table-leaf cell of every page (damaged cells and pages skipped)."""
    size = page_size(data)
    usable = size - (data[20] if data[:16] == HEADER and len(data) > 20 else 0)
    rows: list[Row] = []
    for number in range(1, len(data) // size + 1):
        start = (number - 1) * size
        page = data[start:start + size]
        head = 100 if number == 1 else 0
        if len(page) < head + 8 or page[head] != TABLE_LEAF:
            continue
        cells = struct.unpack(">H", page[head + 3:head + 5])[0]
        for i in range(cells):
            try:
                at = struct.unpack(">H", page[head + 8 + 2 * i:head + 10 + 2 * i])[0]
                rows.append(_cell(data, page, at, usable, size, number))
            except (IndexError, ValueError, struct.error, UnicodeDecodeError):
                continue  # a damaged cell: the rest of the page may still read
    return rows


def _varint(buf: bytes, at: int) -> tuple[int, int]:
    """SQLite's variable-length integer at `at`: (value, the offset after it)."""
    value = 0
    for i in range(8):
        byte = buf[at + i]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + i + 1
    return (value << 8) | buf[at + 8], at + 9


def _cell(data: bytes, page: bytes, at: int, usable: int, size: int, number: int) -> Row:
    """One table-leaf cell, its overflow chain followed; ValueError if it does not read."""
    if not 8 <= at < len(page):
        raise ValueError("cell pointer out of the page")
    length, at = _varint(page, at)
    rowid, at = _varint(page, at)
    if rowid >= 2**63:
        rowid -= 2**64
    most = usable - 35
    if length <= most:
        payload = page[at:at + length]
    else:
        least = (usable - 12) * 32 // 255 - 23
        local = least + (length - least) % (usable - 4)
        local = local if local <= most else least
        payload = page[at:at + local]
        nxt = struct.unpack(">I", page[at + local:at + local + 4])[0]
        seen: set[int] = set()
        while len(payload) < length:
            if nxt == 0 or nxt in seen or nxt * size > len(data):
                raise ValueError("broken overflow chain")
            seen.add(nxt)
            over = data[(nxt - 1) * size:nxt * size]
            nxt = struct.unpack(">I", over[:4])[0]
            payload += over[4:usable]
        payload = payload[:length]
    if len(payload) != length:
        raise ValueError("cell runs off the page")
    return Row(rowid, _columns(payload), number)


def _columns(payload: bytes) -> tuple:
    """The values of one record (SQLite's record format)."""
    end, at = _varint(payload, 0)
    types = []
    while at < end:
        t, at = _varint(payload, at)
        types.append(t)
    values, at = [], end
    for t in types:
        if t == 0:
            values.append(None)
        elif t in (8, 9):
            values.append(t - 8)
        elif 1 <= t <= 6:
            n = (1, 2, 3, 4, 6, 8)[t - 1]
            values.append(int.from_bytes(payload[at:at + n], "big", signed=True))
            at += n
        elif t == 7:
            values.append(struct.unpack(">d", payload[at:at + 8])[0])
            at += 8
        elif t >= 12:
            n = (t - 12) // 2
            chunk = payload[at:at + n]
            values.append(chunk.decode("utf-8") if t % 2 else chunk)
            at += n
        else:
            raise ValueError(f"serial type {t}")
        if at > len(payload):
            raise ValueError("record runs off its payload")
    return tuple(values)
