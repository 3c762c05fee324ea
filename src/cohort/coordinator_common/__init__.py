"""What every coordinator needs from the process around it (Kafka's coordinator-common): the
runtime that hosts a sans-IO shard over its record log (`runtime`). The group coordinator, the
transaction coordinator and the share coordinator are each a set of shards hosted by it."""
