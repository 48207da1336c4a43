"""Operations endpoints: /healthz, /readyz, /metrics."""
