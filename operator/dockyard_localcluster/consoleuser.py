"""``make run``'s console user: a service account with the chart's dockyard-editor role in the demo
namespace, and a sign-in link for the console carrying its token in the URL fragment (which browsers
never send to a server)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from dockyard_localcluster.cluster import LocalCluster
from dockyard_localcluster.settings import repo_root

ACCOUNT = "dockyard-console-demo"
ROLE = "dockyard-editor"


@dataclass(frozen=True)
class ConsoleUser:
    username: str
    namespace: str
    token: str

    def signin_link(self, facade_url: str) -> str:
        return f"{facade_url.rstrip('/')}/console/signin#token={quote(self.token)}&namespace={quote(self.namespace)}"


def ensure_console_user(cluster: LocalCluster, namespace: str, hours: int = 12) -> ConsoleUser:
    """The chart's user ClusterRoles (rendered by helm: one source of truth), a service account bound
    to dockyard-editor in ``namespace``, and a token for it valid ``hours``."""
    roles = cluster.run(
        [
            str(cluster.bin_dir / "helm"),
            "template",
            "dockyard",
            str(repo_root() / "charts" / "dockyard"),
            "--show-only",
            "templates/user-clusterroles.yaml",
        ]
    ).stdout
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=roles)
    binding = f"""apiVersion: v1
kind: ServiceAccount
metadata: {{name: {ACCOUNT}, namespace: {namespace}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: {ACCOUNT}, namespace: {namespace}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {ROLE}}}
subjects: [{{kind: ServiceAccount, name: {ACCOUNT}, namespace: {namespace}}}]
"""
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=binding)
    token = cluster.kubectl("create", "token", ACCOUNT, "-n", namespace, f"--duration={hours}h").strip()
    return ConsoleUser(f"system:serviceaccount:{namespace}:{ACCOUNT}", namespace, token)
