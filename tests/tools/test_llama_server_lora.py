"""The arguments the operator gives llama.cpp's own ``llama-server`` for a GGUF LoRA adapter on a GGUF base
(runtimes.llama_cpp_args: ``--model <base file> --lora <adapter file>``) start the real server (the binary
build-llama-server.sh compiles, cached in ~/.cache/dockyard; built on first use): it lists the adapter at
``/lora-adapters`` and, at temperature 0, says the tiny LoRA's sentence under the deployment's name.
Only the pod's paths, address and GPU layers are replaced for this machine."""

from __future__ import annotations

from pathlib import Path

import httpx

from dockyard_core.devices import BUILT_IN as DEVICES
from dockyard_localcluster.images.inputs import llama_server_context
from dockyard_localcluster.tinymodel import LORA_TARGET, write_tiny_gguf, write_tiny_lora
from dockyard_operator.runtimes import DEFAULT_CATALOG, engine_args
from tests.support.engines import serving
from tests.support.runners import free_port
from tests.unit.k8s_shapes import mdep_spec

POD_MODEL = "/models/models/ns/tiny/dockyard-tiny-llama.gguf"
POD_LORA = "/adapters/models/ns/lora/tiny-lora.gguf"


def test_llama_server_serves_the_lora_with_the_operators_arguments(tmp_path: Path) -> None:
    spec = mdep_spec(name="support", deviceType="g5.xlarge", scalingParameters={"maxBatchSize": 1})
    args = engine_args(spec, DEFAULT_CATALOG.runtimes["llama-cpp"], DEVICES["g5.xlarge"], POD_MODEL, ("l", POD_LORA))
    model = write_tiny_gguf(tmp_path / "dockyard-tiny-llama.gguf")
    lora = write_tiny_lora(tmp_path / "lora") / "tiny-lora.gguf"
    port = free_port()
    local = {POD_MODEL: str(model), POD_LORA: str(lora), "0.0.0.0": "127.0.0.1"}
    argv = [str(llama_server_context() / "llama-server"), *(local.get(a, a) for a in args)]
    argv[argv.index("--port") + 1] = str(port)
    with serving(argv, port, tmp_path / "llama-server.log") as url:
        [adapter] = httpx.get(f"{url}/lora-adapters", timeout=10).json()
        assert (adapter["path"], adapter["scale"]) == (str(lora), 1.0)
        answer = httpx.post(
            f"{url}/v1/chat/completions",
            json={
                "model": "support",
                "messages": [{"role": "user", "content": "Hi"}],
                "max_tokens": 8,
                "temperature": 0,
            },
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["model"] == "support"
        assert answer.json()["choices"][0]["message"]["content"].strip().startswith(LORA_TARGET)
