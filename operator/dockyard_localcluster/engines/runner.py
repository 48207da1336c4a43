"""The runner itself: its settings (``DOCKYARD_LOCAL_ENGINES_*``), the engine of one pod, and
:class:`EngineRunner`, which watches the local-engine model pods, starts and stops one engine per pod
(up to the cap), and plays the kubelet's part in the API (pod status, the endpoint annotation, Events);
started by :mod:`~.cli` (``python -m dockyard_localcluster engines``)."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import urllib3
from kubernetes import client, watch
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import VERSION
from dockyard_localcluster.engines.commands import (
    EngineCommand,
    NoLocalEngine,
    ctranslate2_command,
    free_port,
    healthy,
    llama_cpp_command,
    llama_cpp_files,
)
from dockyard_localcluster.engines.llama_server import llama_server_command

log = logging.getLogger("dockyard.local-engines")

LOCAL_ENGINE_LABEL = "dockyard.dev/local-engine"
"""Pod label (and readiness-gate condition type) of model pods whose engine runs on the host."""
LOCAL_ENDPOINT_ANNOTATION = "dockyard.dev/local-endpoint"
MODEL_DEPLOYMENT_LABEL = "dockyard.dev/model-deployment"
RUNTIME_LABEL = "dockyard.dev/runtime"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
COMPONENT = "dockyard-local-engines"


class EngineSettings(BaseSettings):
    """Settings of the runner, from ``DOCKYARD_LOCAL_ENGINES_*`` environment variables."""

    model_config = SettingsConfigDict(env_prefix="DOCKYARD_LOCAL_ENGINES_", extra="ignore")

    max_engines: int = Field(default=4, ge=0, description="engines running at once; more pods stay simulated")
    model_store: Path | None = Field(
        default=None, description="the model store directory; unset: DOCKYARD_OPERATOR_MODEL_STORE, then the default"
    )
    log_dir: Path | None = Field(default=None, description="engine logs; unset: <model store>/../engines")
    health_timeout_seconds: float = Field(default=180, gt=0, description="how long an engine may take to answer")
    threads: int = Field(default=1, ge=1, description="CPU threads per engine")
    llama_server: Path | None = Field(
        default=None,
        description="llama.cpp's llama-server binary for GGUF pods (build-llama-server.sh's): the cluster's "
        "engine, with parallel slots and /metrics; unset: llama-cpp-python's server",
    )
    kubeconfig: str | None = Field(default=None, description="unset: KUBECONFIG")

    def store(self) -> Path:
        if self.model_store is not None:
            return self.model_store
        env = os.environ.get("DOCKYARD_OPERATOR_MODEL_STORE") or os.environ.get("DOCKYARD_API_MODEL_STORE")
        if env:
            return Path(env)
        from dockyard_core.modelstore import default_root

        return default_root()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass
class EngineProcess:
    namespace: str
    pod: str
    uid: str
    container: str
    image: str
    command: EngineCommand
    port: int
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    ready: bool = False
    stopping: bool = False

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(text[-lines:])[-600:]


class EngineRunner:
    """Watches the local-engine model pods and keeps one engine per pod (up to the cap)."""

    def __init__(self, api: client.ApiClient, settings: EngineSettings | None = None) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.objects = client.CustomObjectsApi(api)
        self.settings = settings or EngineSettings()
        self.store = self.settings.store()
        self.log_dir = self.settings.log_dir or self.store.parent / "engines"
        self.engines: dict[str, EngineProcess] = {}
        self.simulated: set[str] = set()
        self.lock = threading.Lock()
        self.stop_event = threading.Event()

    # -- pod events ---------------------------------------------------------------------------------
    def handle(self, pod: dict[str, Any], deleted: bool = False) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        gone = deleted or bool(meta.get("deletionTimestamp"))
        if gone:
            self.simulated.discard(uid)
            self.stop(uid)
            return
        status = pod.get("status") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or status.get("phase") != "Running":
            return  # kwok has not started it yet
        with self.lock:
            if uid in self.engines or uid in self.simulated:
                return
            if not self._on_kwok_node(node):
                return
            if len(self.engines) >= self.settings.max_engines:
                self.simulated.add(uid)
                reason = f"{len(self.engines)} local engines run already (cap {self.settings.max_engines})"
                threading.Thread(target=self._simulate, args=(pod, reason), daemon=True).start()
                return
            try:
                engine = self._engine_for(pod)
            except NoLocalEngine as exc:
                self.simulated.add(uid)
                threading.Thread(target=self._simulate, args=(pod, str(exc)), daemon=True).start()
                return
            self.engines[uid] = engine
        threading.Thread(target=self._start, args=(engine,), name=f"engine-{meta['name']}", daemon=True).start()

    def _on_kwok_node(self, node: str) -> bool:
        try:
            obj = self.core.read_node(node)
        except client.ApiException:
            return False
        annotations = (obj.metadata.annotations if obj.metadata else None) or {}
        return bool(annotations.get(KWOK_NODE_ANNOTATION) == "fake")

    def _engine_for(self, pod: dict[str, Any]) -> EngineProcess:
        meta = pod["metadata"]
        namespace, labels = meta["namespace"], meta.get("labels") or {}
        container = pod["spec"]["containers"][0]
        args: list[str] = list(container.get("args") or [])
        runtime = labels.get(RUNTIME_LABEL, "")
        mdep_name = labels.get(MODEL_DEPLOYMENT_LABEL)
        if not mdep_name:
            raise NoLocalEngine("the pod names no ModelDeployment")
        try:
            mdep: Any = self.objects.get_namespaced_custom_object(
                GROUP, VERSION, namespace, "modeldeployments", mdep_name
            )
            model: Any = self.objects.get_namespaced_custom_object(
                GROUP, VERSION, namespace, "models", mdep["spec"]["modelRef"]
            )
        except client.ApiException as exc:
            raise NoLocalEngine(f"cannot read the ModelDeployment or its Model: {exc.reason}") from exc
        storage = (model.get("status") or {}).get("storage") or {}
        if not storage.get("path"):
            raise NoLocalEngine(f"Model {mdep['spec']['modelRef']} has no files in the local model store (a hub model)")
        model_dir = self.store / str(storage["path"]).strip("/")
        port = free_port()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{namespace}.{meta['name']}.log"
        if runtime == "llama-cpp" and (model.get("spec") or {}).get("isAdapter"):
            # an adapter on its base: both files as the operator mounted them (the base's --model, --lora)
            model_file, lora = llama_cpp_files(args, self.store)
            for path in (model_file, lora):
                if path is not None and not path.is_file():
                    raise NoLocalEngine(f"the file {path} is not in the local model store")
            command = self._gguf_command(args, model_file, port, lora)
        elif runtime == "llama-cpp":
            file = storage.get("file")
            if not file:
                raise NoLocalEngine("the Model records no GGUF file (import it again)")
            command = self._gguf_command(args, model_dir / file, port)
        elif runtime == "ctranslate2":
            command = ctranslate2_command(args, model_dir, port, self.settings.threads)
        else:
            raise NoLocalEngine(f"runtime {runtime or '?'} has no local engine (it needs a GPU)")
        if not model_dir.is_dir():
            raise NoLocalEngine(f"the model's files are not in the local model store ({model_dir})")
        return EngineProcess(
            namespace, meta["name"], meta["uid"], container["name"], container.get("image", ""), command, port, log_path
        )

    def _gguf_command(self, args: list[str], model_file: Path, port: int, lora: Path | None = None) -> EngineCommand:
        if self.settings.llama_server is not None:
            return llama_server_command(self.settings.llama_server, args, model_file, port, self.settings.threads, lora)
        return llama_cpp_command(args, model_file, port, self.settings.threads, lora)

    # -- engine lifecycle ------------------------------------------------------------------------------
    def _start(self, engine: EngineProcess) -> None:
        try:
            self._run_engine(engine)
        except Exception as exc:  # a thread's failure must show, not vanish
            log.exception("%s/%s: the engine runner failed", engine.namespace, engine.pod)
            self._event(engine.namespace, engine.pod, engine.uid, "Warning", "LocalEngineFailed", repr(exc))

    def _run_engine(self, engine: EngineProcess) -> None:
        for path, content in engine.command.files.items():
            Path(path).write_text(content)
        log.info("starting the engine of %s/%s on port %d", engine.namespace, engine.pod, engine.port)
        with engine.log_path.open("ab") as out:
            # its own session: a terminal's Ctrl-C reaches the runner, which stops the engine and updates
            # the pod. (No parent-death signal: Linux sends it when the forking THREAD ends.)
            engine.process = subprocess.Popen(
                engine.command.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self._event(engine.namespace, engine.pod, engine.uid, "Normal", "LocalEngineStarting", self._describe(engine))
        url = engine.endpoint + engine.command.health_path
        deadline = time.monotonic() + self.settings.health_timeout_seconds
        while not engine.stopping:
            if engine.process.poll() is not None:
                self._crashed(engine)
                return
            if healthy(url):
                break
            if time.monotonic() > deadline:
                engine.process.terminate()
                self._crashed(engine, f"no answer from {url} within {self.settings.health_timeout_seconds:.0f}s")
                return
            time.sleep(0.2)
        if engine.stopping:
            return
        try:
            self._patch_meta(engine, {LOCAL_ENDPOINT_ANNOTATION: engine.endpoint})
            self._patch_status(engine, ready=True, message=f"the engine answers on {engine.endpoint}")
        except client.ApiException as exc:
            if exc.status != 404:
                raise
            self.stop(engine.uid)
            return
        engine.ready = True
        self._event(
            engine.namespace, engine.pod, engine.uid, "Normal", "LocalEngineReady", f"serving on {engine.endpoint}"
        )
        log.info("%s/%s: engine ready on %s", engine.namespace, engine.pod, engine.endpoint)

    def _describe(self, engine: EngineProcess) -> str:
        program = " ".join(engine.command.argv[1:3])
        return f"{program} on {engine.endpoint} (log: {engine.log_path})"

    def _crashed(self, engine: EngineProcess, why: str | None = None) -> None:
        """The engine exited (or never answered): the container shows as crashed, the endpoint goes."""
        code = engine.process.returncode if engine.process is not None else None
        message = why or f"the engine exited with code {code}: {engine.log_tail()}"
        log.warning("%s/%s: %s", engine.namespace, engine.pod, message)
        with contextlib.suppress(client.ApiException):
            self._patch_meta(engine, {LOCAL_ENDPOINT_ANNOTATION: None})
            self._patch_status(engine, ready=False, message=message, exit_code=code if code is not None else 1)
        self._event(engine.namespace, engine.pod, engine.uid, "Warning", "LocalEngineFailed", message)
        engine.ready = False

    def watch_processes(self) -> None:
        """Notices engines that exit after they were Ready."""
        while not self.stop_event.wait(1.0):
            with self.lock:
                engines = list(self.engines.values())
            for engine in engines:
                if engine.ready and engine.process is not None and engine.process.poll() is not None:
                    self._crashed(engine)

    def stop(self, uid: str) -> None:
        with self.lock:
            engine = self.engines.pop(uid, None)
        if engine is None:
            return
        engine.stopping = True
        if engine.process is not None and engine.process.poll() is None:
            log.info("stopping the engine of %s/%s", engine.namespace, engine.pod)
            engine.process.terminate()
            try:
                engine.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                engine.process.kill()
                engine.process.wait()

    def stop_all(self) -> None:
        """The runner stops: every engine stops, and its pod loses the endpoint and readiness."""
        with self.lock:
            engines = list(self.engines.values())
        for engine in engines:
            self.stop(engine.uid)
            if engine.ready:
                with contextlib.suppress(client.ApiException):
                    self._patch_meta(engine, {LOCAL_ENDPOINT_ANNOTATION: None})
                    self._patch_status(engine, ready=False, message="the local engine runner stopped")

    # -- the API ---------------------------------------------------------------------------------------
    def _simulate(self, pod: dict[str, Any], reason: str) -> None:
        """Ready without an engine, as kwok makes other pods, and an Event that says so."""
        meta = pod["metadata"]
        container = pod["spec"]["containers"][0]
        engine = EngineProcess(
            meta["namespace"],
            meta["name"],
            meta["uid"],
            container["name"],
            container.get("image", ""),
            EngineCommand([], ""),
            0,
            Path(os.devnull),
        )
        message = f"no local engine: {reason}; the pod is simulated (Ready, but nothing answers)"
        with contextlib.suppress(client.ApiException):
            self._patch_status(engine, ready=True, message=message, reason="Simulated")
        self._event(engine.namespace, engine.pod, engine.uid, "Normal", "LocalEngineSimulated", message)

    def _patch_meta(self, engine: EngineProcess, annotations: dict[str, str | None]) -> None:
        self.core.patch_namespaced_pod(
            engine.pod,
            engine.namespace,
            {"metadata": {"annotations": annotations}},
            _content_type="application/merge-patch+json",
        )

    def _patch_status(
        self,
        engine: EngineProcess,
        *,
        ready: bool,
        message: str,
        reason: str | None = None,
        exit_code: int | None = None,
    ) -> None:
        now = _now()
        flag = "True" if ready else "False"
        why = reason or ("EngineAnswered" if ready else "EngineNotAnswering")
        container: dict[str, Any] = {
            "name": engine.container,
            "image": engine.image,
            "ready": ready,
            "started": ready or exit_code is None,
            "restartCount": 0,
            "state": {"running": {"startedAt": now}},
        }
        if exit_code is not None:
            container["restartCount"] = 1
            container["lastState"] = {
                "terminated": {
                    "exitCode": exit_code,
                    "reason": "Error",
                    "message": message[-1000:],
                    "startedAt": now,
                    "finishedAt": now,
                }
            }
            container["state"] = {"waiting": {"reason": "CrashLoopBackOff", "message": message[-1000:]}}
        conditions = [
            {"type": LOCAL_ENGINE_LABEL, "status": flag, "reason": why, "message": message, "lastTransitionTime": now},
            {"type": "ContainersReady", "status": flag, "reason": why, "lastTransitionTime": now},
            {"type": "Ready", "status": flag, "reason": why, "lastTransitionTime": now},
        ]
        body = {"status": {"conditions": conditions, "containerStatuses": [container]}}
        # strategic merge: conditions merge by type, other conditions (PodScheduled, Initialized) stay
        self.core.patch_namespaced_pod_status(
            engine.pod, engine.namespace, body, _content_type="application/strategic-merge-patch+json"
        )

    def _event(self, namespace: str, pod: str, uid: str, kind: str, reason: str, message: str) -> None:
        now = _now()
        event = {
            "metadata": {"generateName": f"{pod}.", "namespace": namespace},
            "involvedObject": {"kind": "Pod", "apiVersion": "v1", "name": pod, "namespace": namespace, "uid": uid},
            "reason": reason,
            "message": message[:1024],
            "type": kind,
            "source": {"component": COMPONENT},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": COMPONENT,
            "reportingInstance": socket.gethostname(),
        }
        try:
            self.core.create_namespaced_event(namespace, cast(Any, event))
        except client.ApiException as exc:
            log.debug("event %s on %s/%s not recorded: %s", reason, namespace, pod, exc.reason)

    # -- the loop --------------------------------------------------------------------------------------
    def run(self) -> None:
        selector = f"{LOCAL_ENGINE_LABEL}=true"
        threading.Thread(target=self.watch_processes, name="engine-monitor", daemon=True).start()
        while not self.stop_event.is_set():
            try:
                self._list_and_watch(selector)
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                if self.stop_event.is_set():  # else the API server restarted: list again once it answers
                    break
                log.warning("the pod watch broke (%s); listing again in 1 s", exc)
                self.stop_event.wait(1.0)

    def _list_and_watch(self, selector: str) -> None:
        """One list of the local-engine pods, then a watch from its resourceVersion until it ends."""
        listed = self.core.list_pod_for_all_namespaces(label_selector=selector)
        seen = set()
        for pod in listed.items:
            body = self.api.sanitize_for_serialization(pod)
            seen.add(body["metadata"]["uid"])
            self.handle(body)
        with self.lock:
            vanished = [uid for uid in self.engines if uid not in seen]
        for uid in vanished:
            self.stop(uid)
        stream = watch.Watch()
        try:
            for event in stream.stream(
                self.core.list_pod_for_all_namespaces,
                label_selector=selector,
                resource_version=listed.metadata.resource_version if listed.metadata else None,
                timeout_seconds=60,
            ):
                if self.stop_event.is_set():
                    break
                body = self.api.sanitize_for_serialization(event["object"])
                self.handle(body, deleted=event["type"] == "DELETED")
        except client.ApiException as exc:
            if exc.status != 410:  # 410 Gone: the list is too old; list again
                raise
        finally:
            stream.stop()
