"""TLS material: the CA and serving certificates, and their self-managed renewal."""
