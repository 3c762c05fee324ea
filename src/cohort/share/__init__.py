"""Share groups' data side (KIP-932), in Kafka's rooms: what the partition leader keeps per
share-partition (`partition`), the share sessions (`sessions`), the share coordinator's durable
state (`state`), all sans-IO; and the share partition manager (`manager`), which gives them time,
logs and requests: ShareFetch, ShareAcknowledge and the share offsets admin APIs.
"""
