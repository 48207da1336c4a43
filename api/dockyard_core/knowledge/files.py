"""Where imported documents are kept (docs/knowledge-bases.md, "Documents: import"), on either model store.

- filesystem: ``<model store>/knowledge/files/<namespace>/<fileId>`` and its import record
  ``<fileId>.json`` beside it;
- S3: the objects ``<prefix>knowledge/files/<namespace>/<fileId>`` and ``<fileId>.json`` in the model
  store's bucket; the facade's local spool (``<spool>/knowledge/files``) holds a document only while it is
  assembled and parsed.

In both, the record is written last: a document exists once its record does. The facade writes (a
completed import, the console's upload), the facade reads the records (attach), the indexing run reads
the bytes (:meth:`DocumentFiles.read`; a missing one is ``FileNotFoundError``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dockyard_core.modelstore import ModelStore
from dockyard_core.s3store import S3ModelStore


class DocumentFiles:
    """The documents on the filesystem model store: ``root`` is ``<model store>/knowledge/files``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def describe(self) -> str:
        return str(self.root)

    def spool(self, namespace: str) -> Path:
        """A local directory for a document being assembled (the same file system as its final place)."""
        directory = self.root / namespace
        directory.mkdir(parents=True, exist_ok=True)
        return directory

    def read(self, namespace: str, file_id: str) -> bytes:
        return (self.root / namespace / file_id).read_bytes()

    def read_record(self, namespace: str, file_id: str) -> dict[str, Any] | None:
        """The import record of a document, None when there is none."""
        try:
            found: dict[str, Any] = json.loads((self.root / namespace / f"{file_id}.json").read_text())
        except (FileNotFoundError, ValueError):
            return None
        return found

    def keep(self, namespace: str, file_id: str, partial: Path | None, record: dict[str, Any]) -> None:
        """Keep the parsed file ``partial`` (None: a failed import, no file) as the document, then its record."""
        if partial is not None:
            partial.replace(self.root / namespace / file_id)
        (self.root / namespace / f"{file_id}.json").write_text(json.dumps(record))


class S3DocumentFiles(DocumentFiles):
    """The documents in the S3 model store's bucket; ``root`` is the local spool's ``knowledge/files``."""

    def __init__(self, store: S3ModelStore, root: Path) -> None:
        super().__init__(root)
        self.store = store

    def describe(self) -> str:
        return f"s3://{self.store.bucket}/{self.store.document_key('')}"

    def read(self, namespace: str, file_id: str) -> bytes:
        data = self.store.read_document(namespace, file_id)
        if data is None:
            raise FileNotFoundError(self.store.document_key(namespace, file_id))
        return data

    def read_record(self, namespace: str, file_id: str) -> dict[str, Any] | None:
        data = self.store.read_document(namespace, f"{file_id}.json")
        try:
            return None if data is None else dict(json.loads(data))
        except ValueError:
            return None

    def keep(self, namespace: str, file_id: str, partial: Path | None, record: dict[str, Any]) -> None:
        if partial is not None:
            try:
                self.store.write_document(namespace, file_id, partial)
            finally:
                partial.unlink(missing_ok=True)
        self.store.write_document(namespace, f"{file_id}.json", json.dumps(record).encode())


def document_files(store: ModelStore, root: Path) -> DocumentFiles:
    """The documents of ``store`` (``root``: ``<model store or spool>/knowledge/files``)."""
    if isinstance(store, S3ModelStore):
        return S3DocumentFiles(store, root)
    return DocumentFiles(root)
