"""Command-line flags of ``python -m dockyard_ct2`` / ``dockyard-ct2-server`` (stable: the operator's
runtime catalog and the local engine runner build these; docs/runtimes.md lists them)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

COMPUTE_TYPES = (
    "default",
    "auto",
    "int8",
    "int8_float32",
    "int8_float16",
    "int8_bfloat16",
    "int16",
    "float16",
    "bfloat16",
    "float32",
)


@dataclass(frozen=True)
class SamplingDefaults:
    """The served model's default sampling settings (a request's own values win)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()

    @classmethod
    def from_file(cls, path: Path) -> SamplingDefaults:
        """A JSON file of the settings (``--sampling-config``: temperature, top_p, top_k, max_tokens, stop)."""
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise SystemExit(f"--sampling-config {path}: {exc}") from exc
        return cls.from_json(text, f"--sampling-config {path}")

    @classmethod
    def from_json(cls, text: str, where: str = "--sampling") -> SamplingDefaults:
        """The settings as JSON (what the operator passes in ``--sampling``, the same keys as the file)."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise SystemExit(f"{where}: {exc}") from exc
        if not isinstance(data, dict):
            raise SystemExit(f"{where}: not a JSON object")
        unknown = set(data) - {"temperature", "top_p", "top_k", "max_tokens", "stop"}
        if unknown:
            raise SystemExit(f"{where}: unknown keys {sorted(unknown)}")
        out: dict[str, Any] = {}
        try:
            if "temperature" in data:
                out["temperature"] = float(data["temperature"])
            if "top_p" in data:
                out["top_p"] = float(data["top_p"])
            if "top_k" in data:
                out["top_k"] = int(data["top_k"])
            if data.get("max_tokens"):
                out["max_tokens"] = int(data["max_tokens"])
            stop = data.get("stop") or []
            out["stop"] = (stop,) if isinstance(stop, str) else tuple(str(s) for s in stop)
        except (TypeError, ValueError) as exc:
            raise SystemExit(f"{where}: {exc}") from exc
        return cls(**out)


@dataclass(frozen=True)
class ServerConfig:
    model_dir: Path
    served_model_name: str
    host: str = "127.0.0.1"
    port: int = 8000
    device: str = "auto"
    device_count: int = 1
    compute_type: str = "default"
    max_batch_size: int = 8
    batch_wait_ms: float = 50.0
    max_queue: int = 1024
    max_model_len: int = 4096
    inter_threads: int = 1
    intra_threads: int = 0
    chat_template: str | None = None
    sampling: SamplingDefaults = field(default_factory=SamplingDefaults)
    log_level: str = "info"


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return number


def _non_negative(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return number


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dockyard-ct2-server",
        description="Dockyard's OpenAI-compatible server for CTranslate2 decoder models.",
    )
    p.add_argument("--model-dir", required=True, type=Path, help="CTranslate2 model directory (with tokenizer.json)")
    p.add_argument("--served-model-name", help="the model name clients send (default: the directory's name)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", default=8000, type=int, help="port to listen on (default 8000)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="default auto: cuda if a GPU")
    p.add_argument(
        "--device-count",
        default=1,
        type=_positive,
        help="GPUs to use, one model replica on each, batches spread over them (default 1)",
    )
    p.add_argument(
        "--compute-type",
        default="default",
        choices=COMPUTE_TYPES,
        help="CTranslate2 compute type; one the device lacks falls back (int8_float16 -> int8_float32 on CPU)",
    )
    p.add_argument("--max-batch-size", default=8, type=_positive, help="sequences per generate call (default 8)")
    p.add_argument(
        "--batch-wait-ms",
        default=50.0,
        type=float,
        help="the longest the oldest waiting request waits for the others the recent load expects (default 50; a lone "
        "client never waits)",
    )
    p.add_argument("--max-queue", default=1024, type=_positive, help="waiting sequences before 503 (default 1024)")
    p.add_argument("--max-model-len", default=4096, type=_positive, help="prompt + completion tokens (default 4096)")
    p.add_argument("--inter-threads", default=1, type=_positive, help="batches run at once per device (default 1)")
    p.add_argument("--intra-threads", default=0, type=_non_negative, help="CPU threads per batch (0: CTranslate2's)")
    p.add_argument("--chat-template", type=Path, help="a Jinja2 chat template file (default: the model's, or ChatML)")
    sampling = p.add_mutually_exclusive_group()
    sampling.add_argument("--sampling", help="JSON of default temperature/top_p/top_k/max_tokens/stop (the operator's)")
    sampling.add_argument("--sampling-config", type=Path, help="the same JSON in a file")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    return p


def _sampling(args: argparse.Namespace) -> SamplingDefaults:
    if args.sampling is not None:
        return SamplingDefaults.from_json(args.sampling)
    if args.sampling_config is not None:
        return SamplingDefaults.from_file(args.sampling_config)
    return SamplingDefaults()


def parse_args(argv: list[str] | None = None) -> ServerConfig:
    args = build_parser().parse_args(argv)
    model_dir: Path = args.model_dir
    if not model_dir.is_dir():
        raise SystemExit(f"--model-dir {model_dir}: not a directory")
    template: str | None = None
    if args.chat_template is not None:
        try:
            template = args.chat_template.read_text(encoding="utf-8")
        except OSError as exc:
            raise SystemExit(f"--chat-template {args.chat_template}: {exc}") from exc
    if args.batch_wait_ms < 0:
        raise SystemExit("--batch-wait-ms must not be negative")
    return ServerConfig(
        model_dir=model_dir,
        served_model_name=args.served_model_name or model_dir.resolve().name,
        host=args.host,
        port=args.port,
        device=args.device,
        device_count=args.device_count,
        compute_type=args.compute_type,
        max_batch_size=args.max_batch_size,
        batch_wait_ms=args.batch_wait_ms,
        max_queue=args.max_queue,
        max_model_len=args.max_model_len,
        inter_threads=args.inter_threads,
        intra_threads=args.intra_threads,
        chat_template=template,
        sampling=_sampling(args),
        log_level=args.log_level,
    )
