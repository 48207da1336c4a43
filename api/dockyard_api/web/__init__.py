"""The browser side of a deployed app (docs/web-client-and-widget.md): the web client page, the embeddable
widget's loader script and the short-lived tokens both use instead of API keys.

:mod:`.router` (the routes; :func:`dockyard_api.web.router.install` wires them and :mod:`.cors` into the
facade), :mod:`.service` (the tokens' rules, the environments' browser settings, the limits),
:mod:`.tokens` (signing and verifying), :mod:`.schemas` (requests and answers), :mod:`.assets` (the page
and the script)."""
