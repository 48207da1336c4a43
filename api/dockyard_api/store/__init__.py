"""Sessions, messages, usage statistics and rate limits of deployed apps, in a relational database.

``ConversationStore`` (Contract 3 of the runtime) is created in the facade's lifespan as
``AppState.store`` (:mod:`dockyard_api.deps`): a SQLite file on the model store volume by default (one facade replica),
PostgreSQL when ``DOCKYARD_API_DATABASE_URL`` is set (any number of replicas). Alembic migrations
(``migrations/``) run at start.
"""

from dockyard_api.store.database import default_url
from dockyard_api.store.evaluations import EvaluationRuns, StoredRun
from dockyard_api.store.records import Counters, RateLimits, StoredIntervention, StoredMessage, Turn, UsageReport
from dockyard_api.store.store import ConversationStore
from dockyard_core.errors import DatabaseUnavailableError, RateLimitedError

__all__ = [
    "ConversationStore",
    "Counters",
    "DatabaseUnavailableError",
    "EvaluationRuns",
    "RateLimitedError",
    "RateLimits",
    "StoredIntervention",
    "StoredMessage",
    "StoredRun",
    "Turn",
    "UsageReport",
    "default_url",
]
