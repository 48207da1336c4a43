"""Management: evaluation runs of an app version against an environment (docs/promotion.md)."""
