"""API keys: format, hashing, verification (constant-time compare, environment isolation), Secret form."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

from dockyard_core import apikeys

ENV = {"metadata": {"name": "bot-prod", "namespace": "team", "uid": "u-1"}, "spec": {"appRef": "bot"}}


def test_generated_keys_are_unique_well_formed_and_name_their_secret() -> None:
    keys = [apikeys.generate() for _ in range(50)]
    assert len({k.value for k in keys}) == 50
    for key in keys:
        assert apikeys.key_id_of(key.value) == key.key_id
        assert key.value.startswith(key.prefix + "_")
        assert key.sha256 == apikeys.hash_key(key.value)
        assert len(key.value) > 50


def test_malformed_keys_have_no_id() -> None:
    for value in ("", "nonsense", "dky_short_x", "dky_ABCDEFGHIJKL_" + "x" * 40, "xyz_abcdefghijkl_" + "x" * 40):
        assert apikeys.key_id_of(value) is None


def test_the_secret_holds_only_the_hash_and_belongs_to_the_environment() -> None:
    key = apikeys.generate()
    secret = apikeys.key_secret(key=key, name="ci", environment=ENV, created_by="alice", created_at=datetime.now(UTC))
    assert key.value not in str(secret)
    assert secret["metadata"]["name"] == apikeys.secret_name(key.key_id)
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    stored = apikeys.stored_key(secret)
    assert stored is not None
    assert stored.verify(key.value, "bot-prod") is apikeys.Verdict.OK
    assert stored.verify(key.value, "bot-staging") is apikeys.Verdict.OTHER_ENVIRONMENT
    other = "B" if key.value.endswith("A") else "A"  # a different key (the last character is random)
    assert stored.verify(key.value[:-1] + other, "bot-prod") is apikeys.Verdict.UNKNOWN


def test_stored_key_reads_the_api_servers_base64_form_and_ignores_other_secrets() -> None:
    key = apikeys.generate()
    secret = apikeys.key_secret(key=key, name="ci", environment=ENV, created_by="alice", created_at=datetime.now(UTC))
    served = {**secret, "data": {"sha256": base64.b64encode(key.sha256.encode()).decode()}}
    del served["stringData"]
    assert apikeys.stored_key(served) == apikeys.stored_key(secret)
    assert apikeys.stored_key({**served, "type": "Opaque"}) is None
    assert apikeys.stored_key({"type": apikeys.SECRET_TYPE, "metadata": {"name": "other"}, "data": {}}) is None


def test_listing_shows_name_prefix_and_times_never_the_key() -> None:
    key = apikeys.generate()
    secret = apikeys.key_secret(key=key, name="ci", environment=ENV, created_by="alice", created_at=datetime.now(UTC))
    info = apikeys.key_info(secret)
    assert info is not None
    assert (info.id, info.name, info.prefix, info.created_by) == (key.key_id, "ci", key.prefix, "alice")
    assert key.value not in str(info)
