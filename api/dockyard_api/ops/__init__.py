"""Operations endpoints: /healthz, /readyz, /metrics (:mod:`.router`; the readiness check in :mod:`.service`,
the answers in :mod:`.schemas`)."""
