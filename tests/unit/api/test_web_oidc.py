"""The OpenID Connect sign-in's pure parts: PKCE, the state cookie, the ID token's checks, the user, and the
web client access values (signIn read as kubernetes, the CEL rule of oidc)."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from pydantic import ValidationError

from dockyard_api.web import oidc
from dockyard_api.web.service import signed_in_for
from dockyard_core.resources.v1alpha1.environment import Access, EnvironmentSpec

ISSUER = "https://id.example.com"
CLIENT = "dockyard-web"
KEY = b"k" * 32


def keypair(kid: str) -> tuple[Any, jwt.PyJWKSet]:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(private.public_key()))
    return private, jwt.PyJWKSet.from_dict({"keys": [{**public, "kid": kid, "use": "sig", "alg": "RS256"}]})


PRIVATE, KEYS = keypair("one")


def id_token(private: Any = PRIVATE, kid: str = "one", **claims: Any) -> str:
    now = int(time.time())
    body = {"iss": ISSUER, "aud": CLIENT, "sub": "u-1", "iat": now, "exp": now + 300, "nonce": "n-1", **claims}
    body = {k: v for k, v in body.items() if v is not None}
    return jwt.encode(body, private, algorithm="RS256", headers={"kid": kid})


def verify(token: str, **kw: Any) -> dict[str, Any]:
    return oidc.verify_id_token(token, KEYS, **{"issuer": ISSUER, "client_id": CLIENT, "nonce": "n-1", **kw})


def reason(token: str, **kw: Any) -> str:
    with pytest.raises(oidc.SignInError) as failed:
        verify(token, **kw)
    return failed.value.reason


def test_pkce_challenge_is_rfc7636s_example() -> None:
    verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"  # RFC 7636 appendix B
    assert oidc.pkce_challenge(verifier) == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"


def test_the_state_cookie_opens_only_for_its_state_with_its_key_before_it_expires() -> None:
    pending = oidc.PendingSignIn.new()
    sealed = pending.seal(KEY)
    assert oidc.PendingSignIn.open(KEY, sealed, pending.sent_state) == pending
    for key, cookie, state, why in [
        (KEY, sealed, "other", "state mismatch"),
        (b"x" * 32, sealed, pending.sent_state, "not valid"),
        (KEY, sealed[:-2] + "AA", pending.sent_state, "not valid"),
        (KEY, "garbage", pending.sent_state, "not valid"),
        (KEY, None, pending.sent_state, "no sign-in in progress"),
        (KEY, sealed, None, "no state"),
    ]:
        with pytest.raises(oidc.BadStateError, match=why) as failed:
            oidc.PendingSignIn.open(key, cookie, state)
        assert failed.value.status_code == 400
        assert failed.value.details == {"reason": "bad_state"}
    with pytest.raises(oidc.BadStateError, match="expired"):
        oidc.PendingSignIn.open(KEY, sealed, pending.sent_state, now=pending.exp + 1)


def test_the_authorization_url_carries_the_code_flow_with_pkce_state_and_nonce() -> None:
    pending = oidc.PendingSignIn.new()
    url = oidc.authorization_url(
        {"authorization_endpoint": "https://id.example.com/auth?tenant=a"},
        client_id=CLIENT, redirect_uri="https://d.example.com/e/ns/env/web/oidc/callback", scopes=["email"],
        pending=pending,
    )  # fmt: skip
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    assert parts.netloc == "id.example.com"
    assert query["tenant"] == "a"
    assert query["response_type"] == "code"
    assert query["scope"] == "openid email"
    assert (query["state"], query["nonce"]) == (pending.sent_state, pending.nonce)
    digest = hashlib.sha256(pending.verifier.encode()).digest()
    assert query["code_challenge"] == base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
    assert query["code_challenge_method"] == "S256"
    assert pending.verifier not in url


def test_a_good_id_token_verifies() -> None:
    claims = verify(id_token(email="ann@example.com"))
    assert (claims["sub"], claims["email"]) == ("u-1", "ann@example.com")
    assert verify(id_token(aud=[CLIENT, "other"], azp=CLIENT))["sub"] == "u-1"


def test_id_tokens_are_refused_naming_what_is_wrong() -> None:
    now = int(time.time())
    other_private, _ = keypair("one")
    assert reason(id_token(aud="another-client")) == "wrong_audience"
    assert reason(id_token(aud=[CLIENT, "other"], azp="other")) == "wrong_audience"
    assert reason(id_token(iss="https://evil.example.com")) == "wrong_issuer"
    assert reason(id_token(iat=now - 900, exp=now - 600)) == "id_token_expired"
    assert reason(id_token(nonce="replayed")) == "bad_nonce"
    assert reason(id_token(nonce=None)) == "bad_nonce"
    assert reason(id_token(other_private)) == "bad_signature"  # same kid, another key
    assert reason(id_token(kid="unknown")) == "bad_signature"
    assert reason(id_token(sub=None)) == "invalid_id_token"
    assert reason("not.a.jwt") == "invalid_id_token"
    hmac_token = jwt.encode({"iss": ISSUER, "aud": CLIENT, "sub": "x", "iat": now, "exp": now + 60}, "secret" * 6)
    assert reason(hmac_token) == "invalid_id_token"  # HS256 (keyed with something public?) never accepted
    with pytest.raises(oidc.SignInError) as failed:
        verify(id_token(aud="another-client"))
    assert failed.value.status_code == 401
    assert failed.value.details["field"] == "spec.access.oidc.clientId"


def test_the_user_is_the_verified_email_else_the_sub() -> None:
    assert oidc.user_of({"sub": "u-1", "email": "ann@example.com"}) == "oidc:ann@example.com"
    assert oidc.user_of({"sub": "u-1", "email": "ann@example.com", "email_verified": False}) == "oidc:u-1"
    assert oidc.user_of({"sub": "u-1"}, {"sub": "u-1", "email": "ann@example.com"}) == "oidc:ann@example.com"
    assert oidc.user_of({"sub": "u-1"}, {"sub": "u-2", "email": "eve@example.com"}) == "oidc:u-1"  # other sub


def test_basic_auth_form_encodes_the_client_credentials() -> None:
    value = oidc.basic_auth("my app", "s:e/c")
    assert base64.b64decode(value.removeprefix("Basic ")).decode() == "my%20app:s%3Ae%2Fc"


def test_access_values_signin_is_kubernetes_public_by_default_and_oidc_needs_its_provider() -> None:
    assert Access().web_client == "public"
    assert Access(web_client="signIn").mode == "kubernetes"
    spec = {"appRef": "bot", "access": {"webClient": "oidc"}}
    with pytest.raises(ValidationError, match=r"webClient oidc needs access\.oidc"):
        EnvironmentSpec.model_validate(spec)
    good = {"issuer": "https://id.example.com", "clientId": CLIENT, "clientSecretRef": "web-oidc"}
    assert EnvironmentSpec.model_validate({**spec, "access": {"webClient": "oidc", "oidc": good}}).access
    for issuer in ("http://id.example.com", "ftp://x", "https://id.example.com?x=1", "http://10.0.0.1:5556"):
        with pytest.raises(ValidationError, match="issuer"):
            Access.model_validate({"webClient": "oidc", "oidc": {**good, "issuer": issuer}})
    assert Access.model_validate({"webClient": "oidc", "oidc": {**good, "issuer": "http://127.0.0.1:5556"}})


def test_a_web_token_is_good_for_the_access_it_was_signed_in_for() -> None:
    assert signed_in_for("public", "anon-x")
    assert signed_in_for("public", "oidc:ann@example.com")
    assert signed_in_for("kubernetes", "k8s:ann")
    assert not signed_in_for("kubernetes", "anon-x")
    assert not signed_in_for("kubernetes", "oidc:ann@example.com")
    assert signed_in_for("oidc", "oidc:ann@example.com")
    assert not signed_in_for("oidc", "k8s:ann")
    assert not signed_in_for("oidc", "anon-x")
    assert not signed_in_for("disabled", "oidc:ann@example.com")
