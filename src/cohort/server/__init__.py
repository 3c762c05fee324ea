"""The asyncio server: sockets, framing, per-connection ordering and the API handler table."""
