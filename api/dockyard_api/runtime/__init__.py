"""The app runtime of the deployed-app API (docs/deployed-app-api.md): ``POST {api_base_url}/v1/apps/{app_id}/execute``.

- :mod:`dockyard_api.cache`: watch-fed caches of the objects a turn reads (no API call on the hot path).
- :mod:`.config`: the app content ACTIVE in an environment (AppVersion, or the App's draft), its agents,
  their models and tools, cached by resourceVersion.
- :mod:`.endpoints`: where a ModelDeployment answers (cluster Service, or a local engine on the host).
- :mod:`.model`: the OpenAI-compatible chat-completions client (pooled, streaming, strict parsing).
- :mod:`.tools`: HTTP tools (JSON POST) and MCP tools (the official MCP Python SDK client).
- :mod:`.agent`: one turn: routing between agents, the bounded tool loop, usage summed over model calls.
- :mod:`.service`: the turn around it: the conversation store, rate limits, usage, deadlines.
"""
