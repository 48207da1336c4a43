"""The custom resources of ``dockyard.dev/v1alpha1`` (see DESIGN.md "Custom resources").

Construct one in Python::

    from dockyard_api.resources.v1alpha1 import ModelDeployment, ModelDeploymentSpec, ObjectMeta

    mdep = ModelDeployment(
        metadata=ObjectMeta(name="llama-3-8b", namespace="team-a"),
        spec=ModelDeploymentSpec(model_ref="llama-3-8b", model_type="openSource", name="llama-3-8b",
                                 device_type="g5.xlarge"),
    )
    body = mdep.to_manifest()            # camelCase dict for the API server
    again = ModelDeployment.model_validate(body)
"""

from dockyard_api.resources.base import KubeObject, ObjectMeta
from dockyard_api.resources.v1alpha1.app import (
    Agent,
    App,
    AppContent,
    AppSpec,
    AppVersion,
    AppVersionSpec,
    AppVersionStatus,
    McpServer,
    ToolVersionRef,
)
from dockyard_api.resources.v1alpha1.common import (
    API_KEY_LABEL,
    API_VERSION,
    APP_LABEL,
    AUDIT_LABEL,
    DEPLOYED_AT_ANNOTATION,
    DEPLOYED_BY_ANNOTATION,
    DOCK_STATUS_ID_LABEL,
    ENVIRONMENT_LABEL,
    FAILED,
    PROGRESSING,
    READY,
    RESTORED_FROM_ANNOTATION,
    VERSION,
    Condition,
    DeviceType,
    DockJob,
    JobAction,
    JobStatus,
    JobType,
    ModelType,
    StatusBase,
    WorkloadStatus,
)
from dockyard_api.resources.v1alpha1.environment import (
    ChecklistItem,
    Environment,
    EnvironmentSpec,
    EnvironmentStatus,
    EnvironmentUrls,
    HistoryEntry,
)
from dockyard_api.resources.v1alpha1.model import (
    HubSource,
    ImportSession,
    Model,
    ModelSource,
    ModelSpec,
    ModelStatus,
    ModelStorage,
    UploadSource,
)
from dockyard_api.resources.v1alpha1.modeldeployment import (
    HyperParameters,
    ModelDeployment,
    ModelDeploymentSpec,
    ModelDeploymentStatus,
    OptimizationInfo,
    ScalingParameters,
)
from dockyard_api.resources.v1alpha1.tool import (
    Tool,
    ToolContainer,
    ToolDeployment,
    ToolDeploymentSpec,
    ToolMcp,
    ToolSpec,
)

KINDS: tuple[type[KubeObject], ...] = (Model, ModelDeployment, Tool, ToolDeployment, App, AppVersion, Environment)
"""Every kind of this API version, in the order DESIGN.md lists them."""

__all__ = [
    "API_KEY_LABEL",
    "API_VERSION",
    "APP_LABEL",
    "AUDIT_LABEL",
    "DEPLOYED_AT_ANNOTATION",
    "DEPLOYED_BY_ANNOTATION",
    "DOCK_STATUS_ID_LABEL",
    "ENVIRONMENT_LABEL",
    "FAILED",
    "KINDS",
    "PROGRESSING",
    "READY",
    "RESTORED_FROM_ANNOTATION",
    "VERSION",
    "Agent",
    "App",
    "AppContent",
    "AppSpec",
    "AppVersion",
    "AppVersionSpec",
    "AppVersionStatus",
    "ChecklistItem",
    "Condition",
    "DeviceType",
    "DockJob",
    "Environment",
    "EnvironmentSpec",
    "EnvironmentStatus",
    "EnvironmentUrls",
    "HistoryEntry",
    "HubSource",
    "HyperParameters",
    "ImportSession",
    "JobAction",
    "JobStatus",
    "JobType",
    "KubeObject",
    "McpServer",
    "Model",
    "ModelDeployment",
    "ModelDeploymentSpec",
    "ModelDeploymentStatus",
    "ModelSource",
    "ModelSpec",
    "ModelStatus",
    "ModelStorage",
    "ModelType",
    "ObjectMeta",
    "OptimizationInfo",
    "ScalingParameters",
    "StatusBase",
    "Tool",
    "ToolContainer",
    "ToolDeployment",
    "ToolDeploymentSpec",
    "ToolMcp",
    "ToolSpec",
    "ToolVersionRef",
    "UploadSource",
    "WorkloadStatus",
]
