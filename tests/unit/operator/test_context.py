"""The operator's Context keeps no kind's caches itself: each reconcile registers its state by type."""

from __future__ import annotations

from typing import Any, cast

from dockyard_core.devices import BUILT_IN
from dockyard_operator.context import Context, KindStates
from dockyard_operator.reconcile.environment import EnvironmentState
from dockyard_operator.reconcile.modeldeployment import ModelDeploymentState
from dockyard_operator.runtimes import DEFAULT_CATALOG
from dockyard_operator.settings import OperatorSettings


def context() -> Context:
    return Context(settings=OperatorSettings(), kube=cast(Any, None), catalog=DEFAULT_CATALOG, devices=BUILT_IN)


def test_a_kinds_state_is_made_once_per_context() -> None:
    ctx = context()
    assert ctx.state(ModelDeploymentState) is ctx.state(ModelDeploymentState)
    assert ctx.state(ModelDeploymentState) is not context().state(ModelDeploymentState)


def test_forget_reaches_every_kinds_state_and_keeps_the_deleted_environments() -> None:
    ctx = context()
    mdeps, envs = ctx.state(ModelDeploymentState), ctx.state(EnvironmentState)
    mdeps.statuses["u1"] = ("1", cast(Any, None))
    mdeps.download_secrets["u1"] = (1, "hash", 0.0)
    mdeps.statuses["u2"] = ("7", cast(Any, None))
    envs.audit_digests["u1"] = "digest"
    envs.deleted.add("u1")
    ctx.forget("u1")
    assert mdeps.statuses == {"u2": ("7", None)}
    assert mdeps.download_secrets == {}
    assert envs.audit_digests == {}
    assert envs.deleted == {"u1"}  # a late event of a deleted Environment is still not reconciled


def test_forget_before_any_state_is_made_is_a_no_op() -> None:
    KindStates().forget("u1")
