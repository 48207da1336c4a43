"""What a CustomResourceDefinition says besides the schema: names, columns, subresources.

Each kind declares one :class:`CrdInfo` next to its pydantic model (the way kubebuilder keeps markers
next to Go types); ``dockyard_core.crdgen`` renders it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ColumnType = Literal["string", "integer", "number", "boolean", "date"]

AGE_PATH = ".metadata.creationTimestamp"


@dataclass(frozen=True)
class PrinterColumn:
    """One ``additionalPrinterColumns`` entry of ``kubectl get``."""

    name: str
    json_path: str
    type: ColumnType = "string"
    description: str = ""
    priority: int = 0
    """0: always shown; 1: only with ``kubectl get -o wide``."""


AGE = PrinterColumn("Age", AGE_PATH, "date")


@dataclass(frozen=True)
class ScaleSubresource:
    """The ``/scale`` subresource: what ``kubectl scale`` and autoscalers read and write."""

    spec_replicas_path: str = ".spec.replicas"
    status_replicas_path: str = ".status.replicas"
    label_selector_path: str | None = ".status.selector"


@dataclass(frozen=True)
class CrdInfo:
    """Names, columns and subresources of one kind's CRD (the schema comes from the pydantic model)."""

    plural: str
    short_names: tuple[str, ...]
    printer_columns: tuple[PrinterColumn, ...]
    categories: tuple[str, ...] = ("dockyard",)
    scale: ScaleSubresource | None = None
    selectable_fields: tuple[str, ...] = ()
    """JSON paths usable in ``--field-selector`` (``kubectl get appv --field-selector spec.appRef=x``)."""
