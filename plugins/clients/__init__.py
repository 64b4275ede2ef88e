"""Client integrations: OpenAI-compatible endpoint, shell-init, service, doctor (being built)."""
