"""Management: an environment's canary (start, weight, promote, abort) and its figures per version."""
