"""Dockyard's Prometheus alert rules, from one source: the plain rule file ``charts/dockyard/files/alerts.yaml``
(``python -m dockyard_core.alertrules --output charts/dockyard/files/alerts.yaml``; a test fails when it
differs from what this module writes) and the chart's PrometheusRule, which embeds that file as it is.

The rules read the metrics of docs/observability.md. Each rule's ``for:`` is a parameter (:func:`groups`
``for_override``): the e2e test loads the same rules with a few seconds instead of minutes, and nothing
else differs. Thresholds are parameters too (:class:`Thresholds`), documented in docs/observability.md.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

CLIENT_ERRORS = (
    "ok|bad_request|invalid|invalid_request|not_found|conflict|gone|payload_too_large|unauthenticated|forbidden"
    "|rate_limited"
)
"""Execute outcomes that are no failure of the environment (``ok`` or the caller's own mistake)."""
ENV = "environment_namespace, environment"
DEPLOYMENT = "kind, deployment_namespace, deployment"


@dataclass(frozen=True)
class Thresholds:
    error_ratio: float = 0.05
    """Share of an environment's calls that fail on Dockyard's side (5xx outcomes) over 5 minutes."""
    latency_p95_seconds: float = 30.0
    """p95 of an environment's deployed-app calls over 5 minutes (a turn calls models and tools)."""
    rate_limited_ratio: float = 0.10
    """Share of an environment's calls refused by its rate limits over 10 minutes."""
    stuck_seconds: int = 1800
    """A deployment's dock job IN_PROGRESS for longer than this."""
    failed_jobs_per_hour: int = 3
    """Dock jobs of one type and action that FAILED within an hour."""
    certificate_warning_days: int = 14
    certificate_critical_days: int = 3
    guardrail_block_ratio: float = 0.20
    """Share of an environment's calls whose turn a guardrail blocked, over 15 minutes."""
    facade_error_ratio: float = 0.05
    """Share of the facade's HTTP answers that are 5xx, over 5 minutes."""
    job_pattern: str = ".*dockyard.*"
    """The scrape jobs (``up{job=~...}``) of the facade and the operator."""


@dataclass(frozen=True)
class Rule:
    name: str
    expr: str
    wait: str
    """The rule's ``for:`` (the condition holds this long before the alert fires)."""
    severity: str
    summary: str
    description: str
    labels: dict[str, str] = field(default_factory=dict)

    def render(self, for_override: str | None, annotations: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {"alert": self.name, "expr": self.expr}
        wait = for_override if for_override is not None else self.wait
        if wait != "0s":
            out["for"] = wait
        out["labels"] = {"severity": self.severity, **self.labels}
        if annotations:
            out["annotations"] = {"summary": self.summary, "description": self.description}
        return out


def rules(t: Thresholds) -> dict[str, list[Rule]]:
    """The rule groups, by name."""
    calls = f"sum by ({ENV}) (rate(dockyard_api_executes_total[5m]))"
    return {
        "dockyard.components": [
            Rule(
                "DockyardTargetDown",
                f'up{{job=~"{t.job_pattern}"}} == 0',
                "5m",
                "critical",
                "Dockyard's {{ $labels.job }} cannot be scraped",
                "Prometheus has not scraped {{ $labels.instance }} (job {{ $labels.job }}) for 5 minutes: the "
                "facade or the operator is down or unreachable.",
            ),
            Rule(
                "DockyardStoreDown",
                "dockyard_api_store_up == 0",
                "2m",
                "critical",
                "The conversation database does not answer",
                "The facade {{ $labels.instance }} has not reached its conversation database for 2 minutes: "
                "deployed apps answer 503 (database_unavailable) and no turn is stored.",
            ),
            Rule(
                "DockyardFacadeErrors",
                f'sum by (job) (rate(dockyard_api_requests_total{{status=~"5.."}}[5m])) / '
                f"sum by (job) (rate(dockyard_api_requests_total[5m])) > {t.facade_error_ratio}",
                "10m",
                "warning",
                "The facade answers many requests with 5xx",
                f"More than {t.facade_error_ratio:.0%} of the facade's answers are 5xx "
                "({{ $value | humanizePercentage }}); see dockyard_api_requests_total by route.",
            ),
            Rule(
                "DockyardWebhookCertificateExpiresSoon",
                "dockyard_operator_webhook_certificate_expiry_timestamp_seconds - time() < "
                f"{t.certificate_warning_days} * 86400",
                "1h",
                "warning",
                "The admission webhook's certificate expires soon",
                "The certificate of the operator's admission webhooks ({{ $labels.instance }}) expires in "
                "{{ $value | humanizeDuration }}: renew it (helm upgrade regenerates the chart's own; "
                "cert-manager renews its own unless it is failing).",
            ),
            Rule(
                "DockyardWebhookCertificateExpiresSoon",
                "dockyard_operator_webhook_certificate_expiry_timestamp_seconds - time() < "
                f"{t.certificate_critical_days} * 86400",
                "10m",
                "critical",
                "The admission webhook's certificate expires in days",
                "The certificate of the operator's admission webhooks ({{ $labels.instance }}) expires in "
                "{{ $value | humanizeDuration }}: once it has expired the API server refuses every Dockyard "
                "object (failurePolicy Fail).",
            ),
        ],
        "dockyard.deployments": [
            Rule(
                "DockyardDeploymentFailed",
                'dockyard_operator_deployment_job_status{status="FAILED"} == 1',
                "1m",
                "warning",
                "{{ $labels.kind }} {{ $labels.deployment_namespace }}/{{ $labels.deployment }} failed",
                "The latest dock job of {{ $labels.kind }} {{ $labels.deployment_namespace }}/"
                "{{ $labels.deployment }} FAILED ({{ $labels.reason }}): kubectl describe it for the message.",
            ),
            Rule(
                "DockyardDeploymentStuck",
                f"(time() - dockyard_operator_deployment_job_start_time_seconds > {t.stuck_seconds}) and on "
                f'({DEPLOYMENT}) dockyard_operator_deployment_job_status{{status="IN_PROGRESS"}} == 1',
                "5m",
                "warning",
                "{{ $labels.kind }} {{ $labels.deployment_namespace }}/{{ $labels.deployment }} is stuck",
                "The latest dock job of {{ $labels.kind }} {{ $labels.deployment_namespace }}/"
                f"{{{{ $labels.deployment }}}} has been IN_PROGRESS for more than {t.stuck_seconds // 60} minutes.",
            ),
            Rule(
                "DockyardJobsFailing",
                'sum by (job_type, action) (increase(dockyard_operator_jobs_total{status="FAILED"}[1h])) >= '
                f"{t.failed_jobs_per_hour}",
                "0s",
                "warning",
                "Dock jobs fail repeatedly",
                "{{ $value | humanize }} {{ $labels.job_type }} {{ $labels.action }} jobs FAILED in the last hour "
                "(imports included: kubectl get models,mdep,tdep -A).",
            ),
            Rule(
                "DockyardReconcileErrors",
                'sum by (kind) (rate(dockyard_operator_reconciles_total{result="error"}[10m])) > 0.05',
                "15m",
                "warning",
                "The operator's reconciles of {{ $labels.kind }} fail",
                "Reconciles of {{ $labels.kind }} raise errors ({{ $value | humanize }} per second): see the "
                "operator's log.",
            ),
        ],
        "dockyard.environments": [
            Rule(
                "DockyardEnvironmentErrorRate",
                f'sum by ({ENV}) (rate(dockyard_api_executes_total{{outcome!~"{CLIENT_ERRORS}"}}[5m])) / '
                f"{calls} > {t.error_ratio}",
                "10m",
                "critical",
                "Environment {{ $labels.environment_namespace }}/{{ $labels.environment }} fails its calls",
                f"More than {t.error_ratio:.0%} of the deployed app's calls fail on Dockyard's side "
                "({{ $value | humanizePercentage }}: models, tools or the database; see "
                "dockyard_api_executes_total by outcome).",
            ),
            Rule(
                "DockyardEnvironmentLatencyHigh",
                f"histogram_quantile(0.95, sum by ({ENV}, le) (rate(dockyard_api_execute_duration_seconds_bucket"
                f"[5m]))) > {t.latency_p95_seconds:g}",
                "10m",
                "warning",
                "Environment {{ $labels.environment_namespace }}/{{ $labels.environment }} answers slowly",
                f"The p95 of the deployed app's calls is {{{{ $value | humanizeDuration }}}} (over "
                f"{t.latency_p95_seconds:g} s).",
            ),
            Rule(
                "DockyardRateLimitSaturated",
                f"sum by ({ENV}) (rate(dockyard_api_rate_limited_total[10m])) / (sum by ({ENV}) "
                f"(rate(dockyard_api_rate_limited_total[10m])) + sum by ({ENV}) "
                f"(rate(dockyard_api_executes_total[10m]))) > {t.rate_limited_ratio}",
                "10m",
                "warning",
                "Environment {{ $labels.environment_namespace }}/{{ $labels.environment }} hits its rate limits",
                f"More than {t.rate_limited_ratio:.0%} of the calls are refused with 429 "
                "({{ $value | humanizePercentage }}): raise spec.rateLimits or find the caller.",
            ),
            Rule(
                "DockyardGuardrailBlocksSpiking",
                f'sum by ({ENV}) (rate(dockyard_guardrail_interventions_total{{action="block"}}[15m])) / '
                f"sum by ({ENV}) (rate(dockyard_api_executes_total[15m])) > {t.guardrail_block_ratio}",
                "15m",
                "info",
                "Guardrails block many turns of {{ $labels.environment_namespace }}/{{ $labels.environment }}",
                f"Guardrails blocked more than {t.guardrail_block_ratio:.0%} of the calls "
                "({{ $value | humanizePercentage }}): an attack, or a policy that is too wide (the console's "
                "Guardrails tab lists the interventions).",
            ),
        ],
    }


def groups(
    thresholds: Thresholds | None = None, *, for_override: str | None = None, annotations: bool = True
) -> dict[str, Any]:
    """The rule file's content: ``{"groups": [...]}``; ``for_override`` replaces every rule's ``for:``;
    without ``annotations`` (promtool's rule unit tests compare the alerts' labels only)."""
    found = rules(thresholds or Thresholds())
    return {
        "groups": [
            {"name": name, "rules": [r.render(for_override, annotations) for r in group]}
            for name, group in found.items()
        ]
    }


HEADER = (
    '# Dockyard\'s Prometheus alert rules (docs/observability.md, "Alert rules").\n'
    "# Generated by `python -m dockyard_core.alertrules --output charts/dockyard/files/alerts.yaml`: edit\n"
    "# api/dockyard_core/alertrules.py, not this file. The chart's PrometheusRule embeds this file as it is;\n"
    "# load it into any Prometheus with rule_files.\n"
)


def render(thresholds: Thresholds | None = None, *, for_override: str | None = None, annotations: bool = True) -> str:
    body = yaml.safe_dump(
        groups(thresholds, for_override=for_override, annotations=annotations), sort_keys=False, width=120
    )
    return HEADER + body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--output", type=Path, help="write the rule file here (default: standard output)")
    parser.add_argument("--for", dest="for_override", help="every rule's for: (tests), e.g. 2s")
    args = parser.parse_args(argv)
    text = render(for_override=args.for_override)
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
