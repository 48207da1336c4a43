"""The import sweeper (docs/public-api.md, 'Chunked model import', 'How it is stored'): what expired sessions
leave behind goes, and their Models become Failed (ImportExpired).

Level-based and idempotent (every replica may run it): a session directory goes when it expired and was
never completed, when its Model is gone, or when its import job is over (the operator removes it itself;
this catches a crash in between). A Model still Importing without a job whose session expired becomes
Failed even when its directory is gone already.
"""

from __future__ import annotations

from datetime import datetime

from dockyard_api.public.imports.models import ImportModels, conditions, import_job, session_of
from dockyard_api.public.imports.sessions import files
from dockyard_core import clock, import_status
from dockyard_core.clock import kube_time
from dockyard_core.errors import ConflictError, NotFoundError
from dockyard_core.modelstore import SESSION_ID_RE, ModelStore
from dockyard_core.resources.v1alpha1 import Model

SessionModels = dict[tuple[str, str | None], Model]
"""The uploaded Models by (namespace, import session)."""


class Sweeper:
    def __init__(self, store: ModelStore, models: ImportModels, session_lifetime_seconds: float) -> None:
        self.store = store
        self.models = models
        self.session_lifetime_seconds = session_lifetime_seconds

    async def sweep(self, now: datetime | None = None) -> dict[str, int]:
        """One pass: the counts of sessions removed, bytes freed and Models marked expired."""
        now = now or clock.now()
        models = {(m.metadata.namespace or "", session_of(m)): m for m in await self.models.importing()}
        counts = await files(self._sweep_sessions, models, now)
        for model in models.values():
            session = model.status.import_session
            if model.status.phase != "Importing" or import_job(model) is not None or session is None:
                continue
            if session.expiration_date > now:
                continue
            patch = import_status.failed(
                None,
                import_status.IMPORT_EXPIRED,
                f"import session {session.session_id} expired at {kube_time(session.expiration_date)} before it "
                "was completed",
                conditions(model),
                now,
            )
            try:
                await self.models.patch_status(model, patch)
                counts["models_expired"] += 1
            except (NotFoundError, ConflictError):  # gone, or changed: the next sweep looks again
                pass
            session_id = session.session_id or session_of(model) or ""
            if SESSION_ID_RE.match(session_id):
                await files(self.store.remove, session_id)
        return counts

    def _sweep_sessions(self, models: SessionModels, now: datetime) -> dict[str, int]:
        """The file part of :meth:`sweep` (run in a thread): remove the session directories that are done."""
        counts = {"sessions_removed": 0, "bytes_freed": 0, "models_expired": 0}
        for session_id in self.store.session_ids():
            try:
                meta = self.store.load(session_id)
            except (ValueError, KeyError, TypeError):
                meta = None
            if meta is None:
                if self.store.session_age(session_id) > self.session_lifetime_seconds:
                    counts["bytes_freed"] += self.store.remove(session_id)
                    counts["sessions_removed"] += 1
                continue
            model = models.get((meta.namespace, session_id))
            job = import_job(model) if model else None
            expired = meta.expired(now)
            if job is not None:
                remove = job.status != "IN_PROGRESS"
            elif model is None:
                remove = expired
            else:
                remove = expired or model.status.phase == "Failed"
            if remove:
                counts["bytes_freed"] += self.store.remove(session_id)
                counts["sessions_removed"] += 1
        return counts
