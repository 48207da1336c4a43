"""kopf handlers of Models: a hub model is ReadyToDeploy at once; an uploaded model's import job runs in
:class:`~dockyard_operator.reconcile.model.Importer` (kopf-free) when the facade completes its upload."""

from __future__ import annotations

from typing import Any

import kopf

from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import VERSION
from dockyard_operator.reconcile.model import import_in_flight, is_upload
from dockyard_operator.settings import operator_settings

SETTINGS = operator_settings()  # intervals are fixed when the handlers are registered


# --- Models: a hub model is ReadyToDeploy at once -----------------------------------------------------


@kopf.on.resume(GROUP, VERSION, "models")
@kopf.on.create(GROUP, VERSION, "models")
def model_source(spec: kopf.Spec, status: kopf.Status, patch: kopf.Patch, **_: Any) -> None:
    """A public hub model needs no import: the serving pods download it. Uploads are finished by the
    import job (below)."""
    if spec.get("source", {}).get("hub") and status.get("phase") != "ReadyToDeploy":
        patch.status["phase"] = "ReadyToDeploy"


# --- Models: the import job of an uploaded model ------------------------------------------------------


@kopf.on.event(GROUP, VERSION, "models", when=import_in_flight)
async def model_import_event(event: kopf.RawEvent, memo: kopf.Memo, namespace: str | None, name: str, uid: str,
                             **_: Any) -> None:  # fmt: skip
    """The facade completed an upload session (job IN_PROGRESS): assemble, verify, extract, store."""
    if event["type"] != "DELETED":
        await memo.importer.reconcile(namespace or "", name, uid)


@kopf.timer(GROUP, VERSION, "models", interval=SETTINGS.import_retry_interval_seconds, when=import_in_flight,
            initial_delay=SETTINGS.import_retry_interval_seconds)  # fmt: skip
async def model_import_retry(memo: kopf.Memo, namespace: str | None, name: str, uid: str, **_: Any) -> None:
    """An import that did not record its outcome (an API error, say) is tried again."""
    await memo.importer.reconcile(namespace or "", name, uid)


@kopf.on.event(GROUP, VERSION, "models", when=is_upload)
async def model_import_deleted(event: kopf.RawEvent, memo: kopf.Memo, namespace: str | None, name: str,
                               labels: kopf.Labels, **_: Any) -> None:  # fmt: skip
    """An uploaded Model's files go with it. No finalizer holds the deletion: what a Model deleted while
    the operator was down leaves behind is collected when the operator starts (:meth:`Importer.collect_garbage`)."""
    if event["type"] == "DELETED":
        await memo.importer.deleted(namespace or "", name, labels)
