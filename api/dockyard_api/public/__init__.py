"""The public API (docs/public-api.md), authenticated by an environment's ``x-api-key``: chunked model import
(:mod:`.imports`), model and tool deployment (:mod:`.deploy`), the dock-status lookup (:mod:`.dock_status`), and
the model downloads of the storage initializer (:mod:`.downloads`). Each domain: ``router`` (HTTP only),
``service`` (the logic, through core's repositories), and the answers in :mod:`.schemas`."""
