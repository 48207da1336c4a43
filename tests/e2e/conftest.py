"""The e2e suite: each test file starts from a cluster without another file's admission webhooks."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module", autouse=True)
def _fresh_webhooks(no_webhook_of_an_earlier_file: None) -> None:
    """See :func:`tests.support.k8s_fixtures.no_webhook_of_an_earlier_file`."""
