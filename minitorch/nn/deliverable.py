"""Saving a deliverable: parameter files (``.npz``) and the JSON record that describes them, as one pair.

A lab's last cell saves the trained model and a record of how it was trained; the grader reads both and
refuses a pair that did not come from one run (an ``.npz`` from a new run beside the ``.json`` of an
older one, left by a run that failed between the two writes). So every file is written under a temporary
name first, the record names the SHA-256 of each parameter file's bytes (``parameters_sha256``), and only
then are the files renamed into place, the record last. A crash before the renames leaves the old pair
as it was; one between them leaves a pair whose hashes disagree, which the grader refuses with a message
that says to run the saving cell again.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np

HASHES_KEY = "parameters_sha256"   # record key: {parameter file name: sha256 of its bytes}


class _HasStateDict(Protocol):
    def state_dict(self) -> dict[str, Any]: ...


def npz_bytes(arrays: Mapping[str, Any]) -> bytes:
    """The bytes of ``np.savez`` of `arrays` (what :meth:`Module.save` writes)."""
    buffer = io.BytesIO()
    np.savez(buffer, **{name: np.asarray(value) for name, value in arrays.items()})
    return buffer.getvalue()


def _staged(directory: Path, name: str, data: bytes) -> Path:
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(tmp, 0o644)
    return Path(tmp)


def save_deliverable(directory: str | os.PathLike[str], record_name: str, record: Mapping[str, Any],
                     parameters: Mapping[str, _HasStateDict | Mapping[str, Any]]) -> dict[str, Any]:
    """Write each ``parameters[file_name]`` (a module, or a dict of arrays) to ``directory/file_name`` and
    `record`, with the files' SHA-256 under ``"parameters_sha256"``, to ``directory/record_name``, as one
    pair (see the module's docstring). Returns the record as written."""
    directory = Path(directory)
    for name in (record_name, *parameters):
        if Path(name).name != name or not name:
            raise ValueError(f"save_deliverable: {name!r} must be a file name in {directory}, not a path")
        if name != record_name and not name.endswith(".npz"):
            raise ValueError(f"save_deliverable: parameter file {name!r} must end in .npz")
    if not record_name.endswith(".json"):
        raise ValueError(f"save_deliverable: the record {record_name!r} must end in .json")
    if HASHES_KEY in record:
        raise ValueError(f"save_deliverable: {HASHES_KEY!r} is written by save_deliverable, not by the caller")
    blobs = {name: npz_bytes(p.state_dict() if hasattr(p, "state_dict") else p) for name, p in parameters.items()}
    written = {**record, HASHES_KEY: {name: hashlib.sha256(data).hexdigest() for name, data in blobs.items()}}
    blobs[record_name] = (json.dumps(written, indent=1) + "\n").encode()
    staged: list[tuple[Path, Path]] = []
    try:
        for name, data in blobs.items():   # the record last
            staged.append((_staged(directory, name, data), directory / name))
        for tmp, final in staged:
            os.replace(tmp, final)
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
    return written
