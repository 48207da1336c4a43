"""The app runtime of the deployed-app API (docs/deployed-app-api.md): ``POST {api_base_url}/v1/apps/{app_id}/execute``.

- :mod:`.router`: the endpoint (JSON or Server-Sent Events); :mod:`.schemas`: its request and answer.
- :mod:`.service`: :class:`~.service.AppRuntime`, the turn around the agent loop: the conversation store,
  rate limits, usage, deadlines.
- :mod:`dockyard_api.cache`: watch-fed caches of the objects a turn reads (no API call on the hot path).
- :mod:`.config`: the app content ACTIVE in an environment (AppVersion, or the App's draft), its agents,
  their models and tools (:class:`~.config.AppLookup`), cached by resourceVersion.
- :mod:`.endpoints`: where a ModelDeployment answers (cluster Service, or a local engine on the host).
- :mod:`.model`: the OpenAI-compatible chat-completions client (pooled, streaming, strict parsing).
- :mod:`.tools`: HTTP tools (JSON POST) and MCP tools (the official MCP Python SDK client).
- :mod:`.agent`: one turn: routing between agents, the bounded tool loop, usage summed over model calls.
"""
