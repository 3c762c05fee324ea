"""Security: listeners' TLS and SASL, SCRAM credentials, owner-only files."""
