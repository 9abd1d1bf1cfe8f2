"""The admission server: `trainhook serve` runs the webhook under gunicorn with TLS."""
