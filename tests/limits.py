"""The limits table: every bound and enum SPEC.md puts on a model deployment, as test cases.

One :class:`Limit` row per SPEC.md "Limits" subject (plus required fields and the few bounds Dockyard
adds), each naming a field of ``ModelDeployment.spec`` (camelCase, as on the wire and in the CRD),
values that must be accepted and values that must be rejected. Every consumer checks the same rows:

- ``tests/unit/core/test_resources_limits.py``: the pydantic model and the generated CRD schema (offline);
- the e2e suite: the real API server (``kubectl apply`` of :func:`manifest`);
- the facade: the public deploy call (SPEC.md §4), offline (``test_resources_limits.py``: the body model
  and query type) and through a real facade (``tests/e2e/test_crds.py``): :func:`deploy_request` turns a
  spec into the call (``modelRef`` -> path ``modelId``, ``modelType`` -> query, the rest -> body) and
  :func:`http_field` says where the facade's 422 names the field.

The numbers are read from the resource types (via the CRD schema generated from them), not retyped;
``test_resources_limits.py`` checks them against SPEC.md's literal numbers.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

from dockyard_core.resources.structural import Schema, to_structural
from dockyard_core.resources.v1alpha1 import API_VERSION, ModelDeploymentSpec

Path = tuple[str, ...]


class _Absent:
    """The field is left out."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Final = _Absent()
"""An ``outside`` value meaning: remove the field (it is required)."""


@dataclass(frozen=True)
class Limit:
    """One row: a field of ModelDeployment.spec, values inside the limit and values outside it."""

    subject: str
    """The SPEC.md Limits-table subject (or "required", or the rule's name)."""
    path: Path
    """camelCase path of the field inside ModelDeployment.spec."""
    inside: tuple[Any, ...]
    """Values that must be accepted."""
    outside: tuple[Any, ...]
    """Values that must be rejected; :data:`ABSENT` means the field is left out."""
    given: tuple[tuple[Path, Any], ...] = ()
    """Other fields set first (e.g. maxReplicas for the minReplicas <= maxReplicas rule)."""
    source: str = "SPEC"
    """"SPEC" for SPEC.md's limits; "Dockyard" for bounds and rules Dockyard adds."""

    def cases(self) -> Iterator[tuple[Any, bool]]:
        """``(value, accepted)`` for every value of the row."""
        yield from ((value, True) for value in self.inside)
        yield from ((value, False) for value in self.outside)

    def spec(self, value: Any) -> dict[str, Any]:
        """A ModelDeployment spec, valid except possibly for ``value`` at :attr:`path`."""
        spec = valid_spec()
        for path, given in self.given:
            _set(spec, path, given)
        _set(spec, self.path, value)
        return spec

    def case_id(self, value: Any) -> str:
        shown = repr(value)
        shown = shown if len(shown) <= 24 else f"{shown[:21]}..."
        return f"{'.'.join(self.path)}={shown}"


def valid_spec() -> dict[str, Any]:
    """A ModelDeployment spec that sets every field, inside every limit, leaving room on both sides."""
    return {
        "modelRef": "limits-model",
        "modelType": "openSource",
        "name": "limits-model",
        "isDeployedPreviously": False,
        "hyperParameters": {"temperature": 1.0, "maxTokens": 256, "topP": 0.5, "topK": 50, "stopSequence": ["</s>"]},
        "scalingParameters": {
            "maxBatchSize": 128,
            "minReplicas": 1,
            "maxReplicas": 50,
            "scaleUpDelay": 500,
            "scaleDownDelay": 1000,
        },
        "deviceType": "g5.xlarge",
        "optimizationInfo": {"optimizationType": "vllm", "quantizationType": "no_quantization"},
    }


@dataclass(frozen=True)
class DeployRequest:
    """A public model-deploy call: POST .../models/{model_id}/deploy?{params} with ``body``."""

    model_id: str
    params: dict[str, str]
    body: dict[str, Any]

    def path(self, base: str) -> str:
        return f"{base}/api/public/models/{self.model_id}/deploy"


def deploy_request(spec: dict[str, Any]) -> DeployRequest:
    """The public deploy call that asks for ``spec`` (SPEC.md §4: modelId in the path, modelType in the query).

    A spec without modelRef gives an empty modelId, a URL no route matches (404, not 422).
    """
    body = copy.deepcopy(spec)
    model_id = body.pop("modelRef", "")
    params = {"modelType": body.pop("modelType")} if "modelType" in body else {}
    return DeployRequest(str(model_id), params, body)


def http_field(path: Path) -> str:
    """Where the facade's 422 names the field at ``path`` of ModelDeployment.spec."""
    if path == ("modelRef",):
        return "path.modelId"
    if path == ("modelType",):
        return "query.modelType"
    return "body." + ".".join(path)


def manifest(spec: dict[str, Any], name: str = "limits", namespace: str | None = None) -> dict[str, Any]:
    """A whole ModelDeployment object around ``spec`` (for ``kubectl apply`` / the API server)."""
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {"apiVersion": API_VERSION, "kind": "ModelDeployment", "metadata": metadata, "spec": spec}


def _set(obj: dict[str, Any], path: Path, value: Any) -> None:
    *parents, leaf = path
    for key in parents:
        obj = obj.setdefault(key, {})
    if value is ABSENT:
        obj.pop(leaf, None)
    else:
        obj[leaf] = copy.deepcopy(value)


# --- rows derived from the resource types -----------------------------------------------------------


@cache
def spec_schema() -> Schema:
    """The structural schema of ModelDeployment.spec (what the CRD carries)."""
    return to_structural(ModelDeploymentSpec.model_json_schema(by_alias=True, mode="validation"))


def schema_at(path: Path) -> Schema:
    node = spec_schema()
    for key in path:
        node = node["properties"][key]
    return node


_FLOAT_STEP = 0.0001


def _range(subject: str, path: Path, **kw: Any) -> Limit:
    node = schema_at(path)
    low, high = node["minimum"], node["maximum"]
    if node["type"] == "integer":
        inside: tuple[Any, ...] = (low, high, (low + high) // 2)
        outside: tuple[Any, ...] = (low - 1, high + 1, low + 0.5, str(low))
    else:
        inside = (low, high, (low + high) / 2)
        outside = (low - _FLOAT_STEP, high + _FLOAT_STEP, str(low))
    return Limit(subject, path, inside, outside, **kw)


def _enum(subject: str, path: Path, *outside: Any) -> Limit:
    return Limit(subject, path, tuple(schema_at(path)["enum"]), outside)


def _required() -> Iterator[Limit]:
    for parent in ((), ("hyperParameters",)):
        for field in schema_at(parent)["required"]:
            yield Limit(
                "required", (*parent, field), (), (ABSENT,), source="SPEC" if field != "modelRef" else "Dockyard"
            )


def _stop_sequence() -> Iterator[Limit]:
    path: Path = ("hyperParameters", "stopSequence")
    node = schema_at(path)
    most, longest = node["maxItems"], node["items"]["maxLength"]
    yield Limit("stopSequence items", path, ([], ["x"] * most), (["x"] * (most + 1), "</s>"), source="Dockyard")
    yield Limit("stopSequence item length", path, (["x" * longest],), (["x" * (longest + 1)],), source="Dockyard")


def _build() -> tuple[Limit, ...]:
    hp, sp, oi = ("hyperParameters",), ("scalingParameters",), ("optimizationInfo",)
    return (
        _range("temperature", (*hp, "temperature")),
        _range("maxTokens", (*hp, "maxTokens")),
        _range("topP", (*hp, "topP")),
        _range("topK", (*hp, "topK")),
        _range("maxBatchSize", (*sp, "maxBatchSize")),
        _range("minReplicas", (*sp, "minReplicas")),
        _range("maxReplicas", (*sp, "maxReplicas")),
        _range("scaleUpDelay", (*sp, "scaleUpDelay")),
        _range("scaleDownDelay", (*sp, "scaleDownDelay")),
        _enum("deviceType", ("deviceType",), "p4d.24xlarge", "G5.XLARGE", "g5.xlarge ", ""),
        _enum("optimizationType", (*oi, "optimizationType"), "tensorrt", "VLLM", "vLLM"),
        _enum("quantizationType", (*oi, "quantizationType"), "int4", "int8", "INT8_FLOAT16"),
        _enum("modelType", ("modelType",), "closedSource", "opensource", "fine_tune", ""),
        Limit(
            "minReplicas <= maxReplicas",
            (*sp, "minReplicas"),
            inside=(1, 5),
            outside=(6, 10),
            given=(((*sp, "maxReplicas"), 5),),
            source="Dockyard",
        ),
        *_stop_sequence(),
        *_required(),
    )


LIMITS: Final[tuple[Limit, ...]] = _build()
"""The table."""
