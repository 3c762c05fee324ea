"""Share groups' data side (KIP-932): what the partition leader keeps per share-partition
(`partition`), the share sessions (`sessions`), and the share coordinator's durable state
(`records`, `coordinator`). All sans-IO: the server's host (`cohort.server.share`) gives them
time, logs and sockets.
"""
