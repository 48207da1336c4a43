"""Automatic rollback: the SLO watcher of canaries and fresh deploys (docs/promotion.md, "Automatic rollback").

- :mod:`.slo`: what is watched in an Environment, its figures over the window and the verdict (pure).
- :mod:`.lease`: the Lease that makes one facade replica the watcher.
- :mod:`.watcher`: the loop: figures from the conversation store, a breach moves new sessions back.
"""
