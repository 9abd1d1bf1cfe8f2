"""The one layer that talks to the Kubernetes API server: client, resources, informer, lookup."""
