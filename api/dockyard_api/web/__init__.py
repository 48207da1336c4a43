"""The browser side of a deployed app (docs/web-client-and-widget.md): the web client page, the embeddable
widget's loader script and the short-lived tokens both use instead of API keys.
:func:`dockyard_api.web.router.install` wires them into the facade."""
