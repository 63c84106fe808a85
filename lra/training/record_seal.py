"""Seals and corrections: a record edited after it was written is detected and named.

When a record is written, a seal goes beside it in the same folder: ``<name>.seal``, the record's
SHA-256 in a self-checking JSON file (lra.training.integrity.write_sealed_json, as checkpoints are
sealed). An edit to the record afterwards (a field rewritten by hand, a bad merge) no longer matches
its seal, and the audit says which record and that it changed.

A correction is never an edit of the record: it is a new file beside it,
``<name>.correction-<n>.json`` (sealed the same way), saying who changed which fields from what to
what, why, and when, and naming the digest of the record it corrects. :func:`corrected` is the
record with its corrections applied, in order; the record file itself stays as it was written.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

SEALED = "sealed"  # the record matches its seal
UNSEALED = "unsealed"  # no seal: a record written before seals (or by hand)
EDITED = "edited after it was written"  # the record does not match its seal
SEAL_DAMAGED = "seal damaged"  # the seal itself does not match its own checksum


def seal_path(record: Path) -> Path:
    return record.with_name(record.name + ".seal")


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def seal(record: Path) -> Path:
    """Write ``record``'s seal beside it (call right after writing the record); returns its path."""
    from lra.data.cache import file_digest
    from lra.training.integrity import write_sealed_json

    path = seal_path(record)
    write_sealed_json(path, {"file": record.name, "sha256": file_digest(record), "sealed": _now()})
    return path


def seal_state(record: Path) -> tuple[str, str]:
    """(SEALED, UNSEALED, EDITED or SEAL_DAMAGED; a sentence naming the record and what differs)."""
    from lra.data.cache import file_digest
    from lra.training.integrity import IntegrityError, read_sealed_json

    path = seal_path(record)
    if not path.exists():
        return UNSEALED, f"{record.name} has no seal (written before records were sealed)"
    try:
        recorded = read_sealed_json(path)
    except (IntegrityError, ValueError) as e:
        return SEAL_DAMAGED, f"{path.name} is damaged ({e})"
    if not isinstance(recorded, dict) or recorded.get("file") != record.name:
        return SEAL_DAMAGED, f"{path.name} does not name {record.name}"
    if file_digest(record) != recorded.get("sha256"):
        return EDITED, (
            f"{record.name} was changed after it was written (sealed {recorded.get('sealed')}; "
            "a correction belongs in a separate file: lra.training.record_seal.write_correction)"
        )
    return SEALED, f"{record.name} matches its seal of {recorded.get('sealed')}"


def correction_paths(record: Path) -> list[Path]:
    """The record's corrections, oldest first."""
    found = record.parent.glob(f"{record.name}.correction-*.json")

    def number(p: Path) -> int:
        tail = p.name[len(record.name) + len(".correction-") : -len(".json")]
        return int(tail) if tail.isdigit() else -1

    return sorted((p for p in found if number(p) >= 0), key=number)


def write_correction(record: Path, changes: dict[str, Any], who: str, why: str) -> Path:
    """Correct fields of ``record`` without touching it: a new sealed file saying who changed each
    field in ``changes`` (field -> new value) from what, why and when. Returns its path."""
    import json

    from lra.data.cache import file_digest
    from lra.training.integrity import write_sealed_json

    if not who.strip() or not why.strip():
        raise ValueError("a correction says who made it and why")
    current = corrected(record)
    path = record.with_name(f"{record.name}.correction-{len(correction_paths(record)) + 1}.json")
    body = {
        "file": record.name,
        "record_sha256": file_digest(record),
        "who": who,
        "why": why,
        "date": _now(),
        "changes": {k: {"from": current.get(k), "to": v} for k, v in changes.items()},
    }
    json.dumps(body)  # not JSON-serializable: fail before writing anything
    write_sealed_json(path, body)
    return path


def read_corrections(record: Path) -> list[dict[str, Any]]:
    """Each correction of ``record`` (IntegrityError: one was edited, or corrects another file)."""
    from lra.data.cache import file_digest
    from lra.training.integrity import IntegrityError, read_sealed_json

    out = []
    digest = file_digest(record)
    for path in correction_paths(record):
        body = read_sealed_json(path)
        if body.get("file") != record.name or body.get("record_sha256") != digest:
            raise IntegrityError(f"{path.name} corrects another version of {record.name}")
        out.append(body)
    return out


def corrected(record: Path) -> dict[str, Any]:
    """The record (a JSON object) with its corrections applied in order."""
    import json

    data = json.loads(record.read_text())
    for body in read_corrections(record):
        for field, change in body["changes"].items():
            data[field] = change["to"]
    return data
