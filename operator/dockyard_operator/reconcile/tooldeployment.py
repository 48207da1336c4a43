"""The reconcile of a ToolDeployment: a Tool with an endpoint is probed (:mod:`dockyard_operator.probe`),
one with an image gets its workload applied and its dock job assessed (see :mod:`.workload`)."""

from __future__ import annotations

from typing import Any

from dockyard_core.clock import now
from dockyard_core.resources.v1alpha1 import DOCK_STATUS_ID_LABEL, Tool, ToolDeployment
from dockyard_operator.assess import Verdict, assess, conditions_for, rolled_out
from dockyard_operator.builders.common import endpoint_of, hash_of
from dockyard_operator.builders.tool import tool_selector_labels, tool_workload
from dockyard_operator.context import Body, Context, Key, Views, snapshot
from dockyard_operator.probe import ReachabilityCheck, check_endpoint
from dockyard_operator.reconcile import workload as shared
from dockyard_operator.scheduling import NodeFit
from dockyard_operator.workqueue import Outcome


async def reconcile_tool_deployment(
    ctx: Context, body: Body, views: Views, reach: ReachabilityCheck = check_endpoint
) -> Outcome:
    tdep = ToolDeployment.model_validate(snapshot(body))
    meta = body["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    tool_body = views.one(views.tools, (namespace, tdep.spec.tool_ref))
    if tool_body is None:  # the index may lag behind a Tool just created: ToolNotFound on the API server's word only
        tool_body = await ctx.kube.get("tools", namespace, tdep.spec.tool_ref)
    tool = Tool.model_validate(tool_body) if tool_body else None
    requested = (meta.get("labels") or {}).get(DOCK_STATUS_ID_LABEL)
    before = tdep.status.job
    created = shared.created_at(body)
    key: Key = (namespace, "tool", name)
    deployment = views.one(views.deployments, key)
    status: dict[str, Any] = {"observedGeneration": meta.get("generation")}
    pods: list[dict[str, Any]] = []

    if tool is None:
        problem = Verdict("FAILED", "ToolNotFound", f"Tool {tdep.spec.tool_ref} does not exist in this namespace")
        job, new_job = shared.job_for(
            before, requested, hash_of(problem.reason), meta.get("generation", 0), "TOOLS", created
        )
        verdict = problem if job.status == "IN_PROGRESS" else Verdict(job.status, job.reason, job.message)
        ready = False
    elif tool.spec.endpoint is not None:
        job, new_job = shared.job_for(
            before, requested, hash_of(["endpoint", tool.spec.endpoint]), meta.get("generation", 0), "TOOLS", created
        )
        verdict = Verdict(job.status, job.reason, job.message)
        if job.status == "IN_PROGRESS":
            failure = await ctx.call(reach, tool.spec.endpoint, ctx.settings.endpoint_timeout_seconds)
            verdict = (
                Verdict("FAILED", "EndpointUnreachable", failure)
                if failure
                else Verdict("SUCCESS", "Reachable", f"{tool.spec.endpoint} answers")
            )
        ready = verdict.status == "SUCCESS"
        status["endpoint"] = tool.spec.endpoint
    else:
        workload = tool_workload(tdep, tool, progress_deadline_seconds=ctx.settings.progress_deadline_seconds)
        job, new_job = shared.job_for(
            before, requested, workload.template_hash, meta.get("generation", 0), "TOOLS", created
        )
        children = shared.owned(workload.objects(), "ToolDeployment", meta)
        if await shared.apply_if_changed(ctx, children, deployment):
            deployment = None
        current = deployment if shared.is_template(deployment, job) else None
        pods = [p for p in views.many(views.pods, key) if shared.is_template(p, job)]
        requests = workload.deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
        verdict = assess(
            job,
            current,
            pods,
            min_ready=tdep.spec.replicas,
            requests=requests,
            fit=NodeFit("general-purpose", 0, {}),
            now=now(),
            unschedulable_deadline_seconds=ctx.settings.unschedulable_deadline_seconds,
            events=await shared.mount_events(ctx, namespace, pods) if job.status == "IN_PROGRESS" else (),
        )
        ready = rolled_out(deployment, tdep.spec.replicas)
        status["serviceName"] = workload.service["metadata"]["name"]
        status["endpoint"] = endpoint_of(workload.service)
        status["selector"] = ",".join(f"{k}={v}" for k, v in tool_selector_labels(name).items())

    job = shared.finish(job, verdict)
    replicas, ready_count = shared.counts(deployment)
    status |= {
        "job": shared.dump(job),
        "replicas": replicas,
        "readyReplicas": ready_count,
        "conditions": [
            shared.dump(c)
            for c in conditions_for(
                verdict,
                ready,
                "the tool is reachable" if ready else "the tool is not reachable yet",
                meta.get("generation", 0),
                now(),
                tdep.status.conditions,
            )
        ],
    }
    hold = shared.held_back(body, before, job, requested, ctx.settings.status_settle_seconds)
    written = await shared.write_status(ctx, body, "tooldeployments", status, job, before, new_job, requested, hold)
    return shared.outcome_of(ctx, job, pods, written, hold)
