"""What the sweeper serves over HTTP: /healthz and /readyz, /metrics, and the progress endpoint."""
