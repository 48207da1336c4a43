"""The Dockyard console: the version and environment workflow of SPEC.md as web pages (``/console/``)."""
