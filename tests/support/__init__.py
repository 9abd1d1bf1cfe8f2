"""What the tests, bench/ and scripts/ share: builders of the objects users write and the API
server stores, the Kubernetes API emulator, AdmissionReviews, and a served webhook."""
