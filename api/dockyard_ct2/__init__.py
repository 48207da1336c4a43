"""Dockyard's CTranslate2 server: an OpenAI-compatible HTTP API over ``ctranslate2.Generator``.

Run it with ``python -m dockyard_ct2 --model-dir DIR [--port 8000 ...]`` (console script
``dockyard-ct2-server``); docs/runtimes.md lists the flags and the API. This package imports neither
the facade (``dockyard_api``) nor the operator: it is the whole program of its container image.
"""
