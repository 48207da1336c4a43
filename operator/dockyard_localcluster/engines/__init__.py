"""The local engine runner: real model engines, on the host, for the model pods of the local control plane.

kwok pods run no process. For each Dockyard model pod bound to a kwok node that the operator marked
``dockyard.dev/local-engine: "true"`` (operator setting ``DOCKYARD_OPERATOR_LOCAL_ENGINES``), the
runner plays the kubelet's part for its one container:

1. kwok runs the pod without making it Ready (stage ``dockyard-local-engine-start``);
2. the runner starts the real engine on ``127.0.0.1:<free port>`` with the model's files from the
   local model store: llama.cpp's OpenAI-compatible server (llama-cpp-python) for a GGUF model,
   Dockyard's CTranslate2 server (``python -m dockyard_ct2``) for a CTranslate2 model;
3. when the engine answers its health check, it sets the pod annotation
   ``dockyard.dev/local-endpoint: http://127.0.0.1:<port>`` and then makes the pod Ready (readiness
   gate ``dockyard.dev/local-engine`` and ``Ready`` True) — Contract 1;
4. an engine that exits shows as a crashed container (``CrashLoopBackOff``, its exit code, the tail of
   its log), so the deployment job FAILS with the reason; the annotation goes and the pod is not Ready;
5. the engine stops with the pod (deleted, or the runner stopping).

At most ``max_engines`` engines run at once (default 4). A pod beyond the cap, or whose runtime has no
local engine (vLLM needs a GPU), stays simulated: Ready as kwok would make it, without the annotation,
and an Event (reason ``LocalEngineSimulated``) says so.

Run: ``python -m dockyard_localcluster engines`` (``make run`` starts it beside the operator).

The package's modules: :mod:`~.commands` (the engine's command line, the health probe),
:mod:`~.runner` (the settings, :class:`EngineRunner`) and :mod:`~.cli` (:func:`main`).
"""

from dockyard_localcluster.engines.cli import main
from dockyard_localcluster.engines.commands import (
    CHAT_FORMAT,
    EngineCommand,
    NoLocalEngine,
    ctranslate2_command,
    free_port,
    healthy,
    llama_cpp_command,
)
from dockyard_localcluster.engines.runner import (
    COMPONENT,
    KWOK_NODE_ANNOTATION,
    LOCAL_ENDPOINT_ANNOTATION,
    LOCAL_ENGINE_LABEL,
    MODEL_DEPLOYMENT_LABEL,
    RUNTIME_LABEL,
    EngineProcess,
    EngineRunner,
    EngineSettings,
)

__all__ = [
    "CHAT_FORMAT",
    "COMPONENT",
    "KWOK_NODE_ANNOTATION",
    "LOCAL_ENDPOINT_ANNOTATION",
    "LOCAL_ENGINE_LABEL",
    "MODEL_DEPLOYMENT_LABEL",
    "RUNTIME_LABEL",
    "EngineCommand",
    "EngineProcess",
    "EngineRunner",
    "EngineSettings",
    "NoLocalEngine",
    "ctranslate2_command",
    "free_port",
    "healthy",
    "llama_cpp_command",
    "main",
]
