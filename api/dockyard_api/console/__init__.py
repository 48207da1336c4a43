"""The Dockyard console: the version and environment workflow of docs/apps-environments.md as web pages
(``/console/``; docs/console.md)."""
