"""Environment: a deployment target of an App (draft, staging, production, ...)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator

from dockyard_core import pii
from dockyard_core.resources.base import DockyardModel, ListMap, ListSet, field_rules
from dockyard_core.resources.cel import Rule, immutable
from dockyard_core.resources.crdinfo import AGE, CrdInfo, PrinterColumn
from dockyard_core.resources.v1alpha1.canary import (
    CanaryOutcome,
    CanarySpec,
    CanaryStatus,
    SloFigures,
    SloSpec,
    SloStatus,
)
from dockyard_core.resources.v1alpha1.common import Description, DisplayName, ObjectName, Resource, SemVer, StatusBase
from dockyard_core.resources.v1alpha1.evaluations import Promotion

EnvironmentPhase = Literal["Pending", "Deploying", "Active", "Failed"]
HistoryStatus = Literal["Active", "Previous", "Canary"]
HistoryAction = Literal["Deploy", "Redeploy", "Rollback", "Promote", "AutoRollback", "Canary"]
ChecklistCategory = Literal["Configuration", "Testing", "Security", "Monitoring"]
ChecklistState = Literal["Done", "NotDone", "Manual"]


class RateLimits(DockyardModel):
    """Limits on calls of the deployed app (POST {apiBaseUrl}/v1/apps/{appId}/execute). Over a limit the
    call answers 429 with Retry-After. Counted in the conversation database, so they hold across facade
    replicas sharing PostgreSQL."""

    requests_per_minute: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    """Calls per API key per minute (fixed one-minute windows, UTC); absent: no limit."""
    tokens_per_day: Annotated[int, Field(ge=1, le=1_000_000_000_000)] | None = None
    """Model tokens (input + output) of the whole environment per UTC day; a call is refused once the day's
    total has reached it (the call that crosses it completes); absent: no limit."""


WebClientAccess = Literal["public", "oidc", "kubernetes", "signIn", "disabled"]
"""Who may use the web client: public, oidc, kubernetes, disabled; signIn is the deprecated name of kubernetes
(kept because stored Environments carry it)."""
Origin = Annotated[
    str,
    Field(
        max_length=253,
        pattern=r"^(\*|https?://(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?)(:[0-9]{1,5})?)$",
    ),
]
"""A web origin as browsers send it: scheme://host[:port], no path and no trailing slash; ``*`` is any site."""


IssuerUrl = Annotated[
    str,
    Field(
        max_length=2048,
        pattern=r"^(https://[^\s?#]+|http://(127\.0\.0\.1|localhost|\[::1\])(:[0-9]{1,5})?(/[^\s?#]*)?)$",
    ),
]
"""An OpenID Connect issuer: an https URL (no query or fragment); http only on the loopback address (tests,
a provider beside the facade)."""


ClientId = Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[\x21-\x7e]+$")]
"""An OAuth client id as registered at the provider (printable ASCII, no spaces)."""
Scopes = Annotated[list[Annotated[str, Field(pattern=r"^[\x21\x23-\x5b\x5d-\x7e]{1,64}$")]], Field(max_length=16)]
"""OAuth scopes (RFC 6749 §3.3 scope tokens)."""


class OidcSettings(DockyardModel):
    """The OpenID Connect provider the web client's users sign in with (webClient: oidc). Register
    {webClientUrl}oidc/callback as a redirect URI of the client at the provider."""

    issuer: IssuerUrl
    """The provider's issuer URL (its discovery document is {issuer}/.well-known/openid-configuration, and
    the ID tokens' iss must be exactly this), e.g. https://accounts.example.com."""
    client_id: ClientId
    """The client id registered at the provider (the ID tokens' aud must contain it)."""
    client_secret_ref: ObjectName | None = None
    """Name of a Secret in the environment's namespace whose key clientSecret is the client secret;
    absent: a public client (authorization code with PKCE only)."""
    scopes: Scopes = Field(default_factory=lambda: ["openid", "email", "profile"])
    """The scopes asked for (openid is always added)."""


class Access(DockyardModel):
    """Who may open the environment's browser pages."""

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "!has(self.webClient) || self.webClient != 'oidc' || has(self.oidc)",
            "webClient oidc needs access.oidc (the provider's issuer and the client id)",
            check=lambda a: a.web_client != "oidc" or a.oidc is not None,
            field_path=".oidc",
            reason="FieldValueRequired",
        ),
    )

    web_client: WebClientAccess = "public"
    """The web client page (status.urls.webClientUrl): public (the default: anyone with the URL chats as
    an anonymous end user, bounded by spec.widget's per-user and per-address limits; no API key in the
    browser), oidc (a person signs in with the OpenID Connect provider of access.oidc and chats as that
    user), kubernetes (a person pastes a Kubernetes token allowed to get this Environment; signIn is its
    deprecated name) or disabled (the page answers 404)."""
    oidc: OidcSettings | None = None
    """The OpenID Connect provider of webClient oidc."""

    @property
    def mode(self) -> Literal["public", "oidc", "kubernetes", "disabled"]:
        """webClient with the deprecated signIn read as kubernetes."""
        return "kubernetes" if self.web_client == "signIn" else self.web_client


class OidcPatch(DockyardModel):
    """A JSON merge patch of access.oidc (the settings API's body): the members sent change, null removes
    one; the merged Access is validated as such."""

    issuer: IssuerUrl | None = None
    client_id: ClientId | None = None
    client_secret_ref: ObjectName | None = None
    scopes: Scopes | None = None


class AccessPatch(DockyardModel):
    """A JSON merge patch of spec.access (the settings API's body): webClient, and members of oidc."""

    web_client: WebClientAccess | None = None
    oidc: OidcPatch | None = None


class WidgetSettings(DockyardModel):
    """The embeddable widget ({widget_url}/v1/loader.js): which sites may embed it and how hard it may
    be used. Without an API key the widget asks POST {apiBaseUrl}/v1/widget/token for a short-lived
    token, which the facade issues only to a page whose Origin is listed here. A snippet carrying an API
    key (data-api-key) chats from any site while allowedOrigins is empty, and from the listed ones only
    once it is not."""

    allowed_origins: Annotated[list[Origin], Field(max_length=64)] = Field(default_factory=list)
    """Sites allowed to embed the widget, e.g. https://shop.example.com (scheme, host and port exactly as
    the browser sends them in Origin). They also make up the CORS answer of the deployed-app API and the
    web client page's frame-ancestors. Empty: no site gets a token (the key-less widget shows that the
    site is not allowed), and a snippet carrying an API key works on every site (the owner has not
    restricted the sites)."""
    token_ttl_seconds: Annotated[int, Field(ge=60, le=86_400)] = 900
    """How long a widget token lasts; the widget renews it (keeping the same anonymous end user)."""
    requests_per_minute_per_token: Annotated[int, Field(ge=1, le=10_000)] = 20
    """Messages one end user (one widget token and its renewals) may send per minute."""
    requests_per_minute_per_address: Annotated[int, Field(ge=1, le=100_000)] = 60
    """Messages all widget and web-client users of one client IP address may send per minute."""
    tokens_per_minute_per_address: Annotated[int, Field(ge=1, le=10_000)] = 10
    """Tokens one client IP address may obtain per minute (new end users and renewals)."""


class PiiCustomPattern(DockyardModel):
    """A kind of personal data of the owner's own (a customer number, a policy id): a regular expression
    (Python syntax, the ``regex`` module) whose matches are redacted like the built-in entities."""

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            f"!(self.name in {list(pii.ENTITIES)})",
            "name is already a built-in entity's name",
            check=lambda c: c.name not in pii.ENTITIES,
            field_path=".name",
        ),
    )

    name: Annotated[str, Field(pattern=pii.CUSTOM_NAME.pattern)]
    """The entity name its placeholders carry (``<CUSTOMER_ID_3f9a1c>``): A-Z, 0-9 and _, from a letter."""
    pattern: Annotated[str, Field(min_length=1, max_length=pii.PATTERN_MAX_CHARS)]
    """The regular expression; its whole match is the value. One that does not compile, or that matches the
    empty text, is refused when the Environment is written. A text it cannot finish within 50 ms is
    withheld whole (docs/guardrails.md)."""

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        problem = pii.pattern_problem(value)
        if problem:
            raise ValueError(problem)
        return value


class PiiRedaction(DockyardModel):
    """Where the runtime replaces the PII it finds by placeholders."""

    storage: bool = True
    """Before anything is stored: conversations, usage, interventions, audit records and logs."""
    model: bool = False
    """Before the user's message (and the history) reaches a model."""
    tools: bool = False
    """In a tool call's arguments before the tool gets them, and in its result before the model does."""
    answer: bool = False
    """In the agent's answer before the user gets it."""


PhoneRegion = Annotated[str, Field(pattern=r"^[A-Z]{2}$")]


class PiiSettings(DockyardModel):
    """PII protection of the environment (docs/guardrails.md, "PII protection"): what is recognised and
    where it is redacted."""

    entities: Annotated[list[pii.PiiEntity], Field(max_length=len(pii.ENTITIES)), ListSet()] | None = None
    """What to recognise; absent: EMAIL_ADDRESS, PHONE_NUMBER, CREDIT_CARD, IBAN_CODE and IP_ADDRESS. National
    ids (US_SSN, UK_NINO, UK_NHS, ES_NIF, ES_NIE, IT_FISCAL_CODE, FR_NIR, DE_TAX_ID, NL_BSN, PL_PESEL,
    FI_PERSONAL_IDENTITY_CODE, SE_PERSONNUMMER) only where listed."""
    phone_regions: Annotated[list[PhoneRegion], Field(max_length=32), ListSet()] | None = None
    """ISO 3166 regions whose national phone numbers (written without +country code) are recognised;
    absent: US, GB, DE, FR, ES, IT, NL; empty: none. Numbers written with + or 00 are recognised from every
    region."""
    custom_patterns: Annotated[list[PiiCustomPattern], Field(max_length=32), ListMap("name")] = Field(
        default_factory=list
    )
    """The owner's own kinds of personal data."""
    redact: PiiRedaction = Field(default_factory=PiiRedaction)
    """Where to redact; absent: before storage only."""

    @field_validator("phone_regions")
    @classmethod
    def _known_regions(cls, value: list[str] | None) -> list[str] | None:
        unknown = [r for r in value or () if r not in pii.phone_regions()]
        if unknown:
            raise ValueError(f"not a region phone numbers know: {', '.join(unknown)}")
        return value


class EnvironmentSpec(DockyardModel):
    """An isolated deployment target of an App, with its own configuration, URLs, API keys and history.

    Deploying a version, and rolling back from the history, both mean setting appVersion. Deleting the
    environment deactivates its endpoints and releases its resources; audit logs and usage statistics
    are kept.
    """

    app_ref: Annotated[ObjectName, field_rules(immutable("appRef"))]
    """Name of the App (in this namespace) this environment deploys; immutable."""
    display_name: DisplayName | None = None
    """Name entered at creation (its "name"); the object's name when absent."""
    description: Description = ""
    """What the environment is for."""
    app_version: SemVer | None = None
    """The linked version (the AppVersion of appRef with this spec.version) to deploy. Change it to
    deploy another version or to roll back. Absent: the environment serves the App's draft (the draft
    environment)."""
    configuration: dict[str, Any] = Field(default_factory=dict)
    """Environment-specific variables of the agents' instructions, independent of other environments: each
    {{name}} in an agent's instructions is replaced by configuration[name] (a string as it is, other values
    as their JSON text), so one version behaves per environment (a support email, a region, a tone). A
    placeholder with no value (no key, or null) is left as written; \\{{name}} is written as {{name}}."""
    rate_limits: RateLimits | None = None
    """Rate limits of the deployed app; absent: none (the checklist's "Rate limits set" is NotDone)."""
    access: Access | None = None
    """Who may open the web client page; absent: public."""
    widget: WidgetSettings | None = None
    """The embeddable widget: allowed sites, token lifetime, per-user and per-address limits; absent: no
    site may embed it."""
    pii: PiiSettings | None = None
    """PII protection: personal data recognised in what users and agents write, and replaced by placeholders
    before storage, a model, a tool or the answer as chosen; absent: not configured (nothing is redacted)."""
    promotion: Promotion | None = None
    """What a version must pass before it is deployed here: an evaluation run at a pass rate, and an
    environment it must have passed first (docs/promotion.md); absent: no gate."""
    canary: CanarySpec | None = None
    """A canary: the share of new sessions that start on another version (each session keeps the version it
    started on); absent: every new session starts on appVersion (docs/promotion.md)."""
    slo: SloSpec | None = None
    """Service levels watched during a canary and after a deploy; a breach moves new sessions back to the
    previous working version on its own; absent: nothing watched."""


class HistoryEntry(DockyardModel):
    """One deployment of a version to the environment (the deployment history)."""

    version: Annotated[str, Field(min_length=1, max_length=32)]
    """The app version deployed (draft for the App's draft)."""
    deployed_at: datetime
    """When it was deployed."""
    deployed_by: Annotated[str, Field(max_length=253)] = ""
    """Who deployed it (from the dockyard.dev/deployed-by annotation)."""
    status: HistoryStatus
    """Active for the version deployed now, Previous for earlier ones, Canary for the canary running now."""
    action: HistoryAction = "Deploy"
    """What was asked: Deploy (another version linked), Redeploy (the Active version deployed again),
    Rollback (a previous working version chosen from the history), Promote (a canary's version made the
    active one), AutoRollback (the SLO watcher went back to the previous working version) or Canary (a
    canary started, or its weight changed)."""
    healthy: bool | None = None
    """Whether this deployment became healthy (the environment Active with it): true once it did; false
    when it failed, or was replaced before it did; unset while it is still being deployed."""
    evaluation_run: Annotated[str, Field(max_length=64)] = ""
    """The evaluation run behind this deployment: the version's newest run in this environment when it was
    deployed (empty: none; docs/promotion.md)."""
    weight: Annotated[int, Field(ge=0, le=100)] | None = None
    """A Canary entry's percent of new sessions."""
    outcome: CanaryOutcome | None = None
    """How a Canary entry ended: Promoted, Aborted, RolledBack (an SLO breach) or Reweighted (a new weight)."""
    reason: Annotated[str, Field(max_length=1024)] = ""
    """Why an automatic rollback happened: the breached SLO and its figures."""
    figures: SloFigures | None = None
    """The figures behind an automatic rollback."""


class EnvironmentUrls(DockyardModel):
    """Where the deployed app is reached."""

    web_client_url: str | None = None
    """The web client URL generated for the environment."""
    api_base_url: str | None = None
    """Base URL of the deployed-app API (POST {apiBaseUrl}/v1/apps/{appId}/execute)."""
    widget_script_url: str | None = None
    """The embeddable widget's loader script ({widget_url}/v1/loader.js)."""


class ChecklistItem(DockyardModel):
    """One item of the pre-production checklist."""

    category: ChecklistCategory
    """Configuration, Testing, Security or Monitoring."""
    item: Annotated[str, Field(min_length=1, max_length=128)]
    """What is checked, e.g. "API keys generated"."""
    state: ChecklistState
    """Done or NotDone where Dockyard can tell from the cluster's state; Manual where a person must."""
    detail: Annotated[str, Field(max_length=1024)] = ""
    """How the state was computed, or what to check by hand."""


class UsageCounters(DockyardModel):
    """Calls of the deployed app and the model tokens they used."""

    requests: Annotated[int, Field(ge=0)] = 0
    """Calls answered (successes and errors)."""
    errors: Annotated[int, Field(ge=0)] = 0
    """Calls that ended in an error."""
    rate_limited: Annotated[int, Field(ge=0)] = 0
    """Calls refused by a rate limit (429), not counted in requests."""
    tokens_in: Annotated[int, Field(ge=0)] = 0
    """Model input tokens."""
    tokens_out: Annotated[int, Field(ge=0)] = 0
    """Model output tokens."""


class VersionUsageSummary(DockyardModel):
    """One app version's calls over the last 30 days (the version each call's session is pinned to)."""

    version: Annotated[str, Field(max_length=32)]
    """The app version (a semantic version, or draft)."""
    requests: Annotated[int, Field(ge=0)] = 0
    """Calls answered (successes and errors)."""
    errors: Annotated[int, Field(ge=0)] = 0
    """Calls that ended in an error."""
    tokens_in: Annotated[int, Field(ge=0)] = 0
    """Model input tokens."""
    tokens_out: Annotated[int, Field(ge=0)] = 0
    """Model output tokens."""
    last_day: Annotated[str, Field(max_length=10)] = ""
    """The last UTC day with a call of this version (YYYY-MM-DD)."""


class UsageSummary(DockyardModel):
    """A summary of the usage statistics (the full figures, per day and API key: GET
    /api/v1/namespaces/{namespace}/environments/{name}/usage). Written by the facade at most once a minute
    when usage changed; the statistics live in the conversation database and outlive the environment."""

    day: str
    """The UTC day of ``today`` (YYYY-MM-DD)."""
    today: UsageCounters
    """Usage on that day."""
    last30_days: UsageCounters
    """Usage over the 30 days ending that day."""
    updated_at: datetime
    """When the summary was computed."""
    versions: Annotated[list[VersionUsageSummary], Field(max_length=20)] = Field(default_factory=list)
    """Per app version over the last 30 days, the most recently used first (at most 20): what the checklist
    item "Analytics" reads for the active version."""


class EnvironmentStatus(StatusBase):
    """Observed state of an Environment."""

    phase: EnvironmentPhase | None = None
    """Pending, Deploying, Active or Failed."""
    active_version: str | None = None
    """The version serving now (draft for the App's draft)."""
    app_id: str | None = None
    """The app identifier of the deployed-app API and of the widget's data-app-id."""
    urls: EnvironmentUrls | None = None
    """Generated URLs."""
    curl_script: str | None = None
    """A cURL command calling the deployed app by API (the API key left as a placeholder)."""
    embed_code: str | None = None
    """The HTML snippet that embeds the chat widget in a web page (the Embed Code): a container element
    and the loader script with this environment's app id; paste it into every page of an allowed site."""
    history: Annotated[list[HistoryEntry], Field(max_length=100)] = Field(default_factory=list)
    """Deployments, newest first: one Active entry, then Previous ones."""
    checklist: Annotated[list[ChecklistItem], Field(max_length=64)] = Field(default_factory=list)
    """The pre-production checklist, recomputed on every reconcile."""
    usage: UsageSummary | None = None
    """Usage of the deployed app today and over 30 days (written by the facade)."""
    canary: CanaryStatus | None = None
    """The running canary, or how the last one ended (docs/promotion.md)."""
    slo: SloStatus | None = None
    """What the SLO watcher last measured per version (written by the facade)."""


class Environment(Resource):
    """A deployment target of an App (draft, staging, production, ...) and the version it serves."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="environments",
        short_names=("env",),
        printer_columns=(
            PrinterColumn("App", ".spec.appRef", description="The App"),
            PrinterColumn("Version", ".spec.appVersion", description="The linked app version"),
            PrinterColumn("Active", ".status.activeVersion", description="The version serving now"),
            PrinterColumn("Status", ".status.phase", description="Pending, Deploying, Active or Failed"),
            PrinterColumn(
                "Canary", ".status.canary.summary", description="The canary: version and weight, or how it ended"
            ),
            PrinterColumn("URL", ".status.urls.webClientUrl", priority=1, description="Web client URL"),
            AGE,
        ),
        selectable_fields=(".spec.appRef",),
    )

    kind: Literal["Environment"] = "Environment"
    spec: EnvironmentSpec
    status: EnvironmentStatus = Field(default_factory=EnvironmentStatus)
