"""Knowledge-base documents on the S3 model store: a real MinIO (built from its Go module) on loopback holds
the import sessions' chunks and the documents; the facade and the operator both use the s3 backend. A
document through the PUBLIC chunked import lands in the bucket (``<prefix>knowledge/files/<ns>/<fileId>``
and its record), is attached, indexed by the operator's run (a host process reading it from the bucket)
and found by a keyword search of the index the run built; an unreadable one fails its import with the
reason and leaves no document object."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from minio import Minio

from dockyard_core.knowledge.job import open_index
from tests.e2e.test_delivery_s3 import BUCKET, s3_settings
from tests.e2e.test_execute import _key
from tests.e2e.test_knowledge_bases import BROKEN_PDF, ENVIRONMENT, GUIDE, Public
from tests.support.cluster import E2ECluster
from tests.support.dockyard import create, get, hub_model, model_deployment
from tests.support.knowledge import local_knowledge_runs
from tests.support.minio import MinioServer
from tests.support.runners import RunningFacade, run_local_runtime
from tests.support.waiting import wait_for


@pytest.fixture(scope="module")
def prefix() -> str:
    return f"kb-{os.urandom(3).hex()}/"


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kb-s3")


@pytest.fixture(scope="module")
def facade(cluster: E2ECluster, crds: None, minio: MinioServer, prefix: str, state: Path) -> Iterator[RunningFacade]:
    s3 = s3_settings(minio, prefix)
    index = f"sqlite:///{state / 'index.sqlite'}"  # the facade's and the runs' index (the spools differ)
    operator_env = {**local_knowledge_runs(state), **{f"DOCKYARD_OPERATOR_{k}": v for k, v in s3.items()}}
    operator_env["DOCKYARD_OPERATOR_MODEL_STORE"] = str(state / "operator-spool")
    operator_env["DOCKYARD_OPERATOR_KNOWLEDGE_INDEX"] = index
    fields: dict[str, Any] = {k.lower(): v for k, v in s3.items()}
    with run_local_runtime(state, operator_env, knowledge_index=index, **fields) as (_, running):
        yield running


def test_a_document_imported_to_the_s3_store_is_indexed_and_found(
    api: client.ApiClient, namespace: str, facade: RunningFacade, minio: MinioServer, prefix: str, state: Path
) -> None:
    hub_model(api, namespace, "tiny")
    model_deployment(api, namespace, "tiny")
    agent = {"name": "helper", "version": "1.0.0", "instructions": "Answer from the guide.", "model": "tiny"}
    create(api, namespace, "apps", "App", "bot", {"agents": [agent]})
    public = Public(facade, namespace, _key(api, namespace, ENVIRONMENT))
    created = public.http.post(public.kb, headers=public.headers, json={
        "name": "harbour", "version": "1.0.0", "description": "the harbour's guide",
        "retrieval": {"mode": "keyword"}, "chunking": {"maxChars": 300, "overlapChars": 30},
    })  # fmt: skip
    assert created.status_code == 200, created.text

    guide, broken = public.upload("guide.md", GUIDE.encode()), public.upload("scan.pdf", BROKEN_PDF)
    assert guide["status"] == "SUCCESS", guide
    assert broken["status"] == "FAILED"
    assert "PDF" in broken["message"]

    # the document and its record are objects in the bucket, not files of either spool; the chunks are gone
    bucket = Minio(minio.endpoint.removeprefix("http://"), minio.access_key, minio.secret_key, secure=False)
    base = f"{prefix}knowledge/files/{namespace}/"
    objects = {o.object_name.removeprefix(base): o for o in bucket.list_objects(BUCKET, prefix=base, recursive=True)}
    assert set(objects) == {guide["modelId"], f"{guide['modelId']}.json", f"{broken['modelId']}.json"}
    stored = bucket.get_object(BUCKET, base + guide["modelId"])
    try:
        assert stored.read() == GUIDE.encode()
    finally:
        stored.close()
        stored.release_conn()
    assert not list((state / "model-store").rglob(guide["modelId"]))
    assert not [o for o in bucket.list_objects(BUCKET, prefix=f"{prefix}sessions/", recursive=True)
                if "/chunks/" in o.object_name]  # fmt: skip

    attached = public.http.post(f"{public.kb}/harbour/1.0.0/documents", headers=public.headers,
                                json={"fileId": guide["modelId"]})  # fmt: skip
    assert attached.status_code == 200, attached.text
    refused = public.http.post(f"{public.kb}/harbour/1.0.0/documents", headers=public.headers,
                               json={"fileId": broken["modelId"]})  # fmt: skip
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["details"]["reason"] == broken["message"]

    def indexed() -> dict[str, Any] | None:
        status = get(api, namespace, "knowledgebases", "harbour-1.0.0").get("status") or {}
        return status if status.get("phase") in ("Ready", "Failed") and status.get("indexed") else None

    status = wait_for(indexed, timeout=90, what="harbour-1.0.0 indexed")
    assert (status["phase"], status["documents"], status["errorCount"]) == ("Ready", 1, 0), status
    assert status["bytes"] == len(GUIDE.encode())
    assert status["indexed"] == [{"name": "guide.md", "fileId": guide["modelId"], "chunks": status["chunks"]}]

    async def search() -> list[Any]:
        index = open_index(f"sqlite:///{state / 'index.sqlite'}")
        await index.start()
        try:
            return await index.keyword_search(f"{namespace}/harbour-1.0.0", "Where does the pilot board?", limit=3)
        finally:
            await index.close()

    hits = asyncio.run(search())
    assert hits, "the indexed document is not found"
    assert hits[0].document_id == "guide.md"
    assert "buoy 3" in hits[0].text
