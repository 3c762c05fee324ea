"""The assignor's view of a group's members (`target._member_specs`) is kept between rebalances
and rebuilt only where something changed: it must always equal a view built from scratch."""

from __future__ import annotations

from cg_helpers import IDS, hb, image, join, make_shard

from cohort.coordinator import CoordinatorConfig, GroupCoordinatorShard, MetadataImage, TopicImage, target
from cohort.coordinator import shard as shard_module


def fresh(group, img):
    """The view built from nothing, leaving the group's own caches as they were."""
    saved = group.spec_cache, set(group.spec_dirty), group.spec_image, group.spec_topic_ids
    group.spec_cache, group.spec_dirty, group.spec_image, group.spec_topic_ids = {}, set(), None, {}
    try:
        return target._member_specs(group, img)
    finally:
        group.spec_cache, group.spec_dirty, group.spec_image, group.spec_topic_ids = saved


def with_topic(img: MetadataImage, name: str, topic_id, partitions: int, version: int) -> MetadataImage:
    return MetadataImage.of([*img.by_name.values(), TopicImage(name, topic_id, partitions)], version)


def test_the_cached_view_survives_unrelated_topic_changes_and_is_rebuilt_for_related_ones():
    import uuid

    shard = make_shard()
    for m in ("a", "b", "c"):
        assert shard.handle(join("g", m, topics=("foo", "bar")), 1).response.error_code == 0
    group = shard.state.groups["g"]
    cache = group.spec_cache
    assert cache and target._member_specs(group, shard.image) == fresh(group, shard.image)

    # a topic nobody in the group subscribes to appears: a new image, the same view
    unrelated = with_topic(shard.image, "other", uuid.UUID(int=0x07), 4, 2)
    shard.update_metadata(unrelated)
    specs = target._member_specs(group, unrelated)
    assert group.spec_cache is cache and specs == fresh(group, unrelated)

    # a subscribed topic is deleted: the view changes and is rebuilt
    without_bar = MetadataImage.of([t for t in unrelated.by_name.values() if t.name != "bar"], 3)
    shard.update_metadata(without_bar)
    specs = target._member_specs(group, without_bar)
    assert all(IDS["bar"] not in s.subscribed_topic_ids for s in specs.values())
    assert specs == fresh(group, without_bar)

    # and the group's next rebalance still agrees with a fresh view
    assert shard.handle(join("g", "d", topics=("foo", "bar")), 2).response.error_code == 0
    assert target._member_specs(group, shard.image) == fresh(group, shard.image)
    assert shard.handle(hb("g", "a", 1), 3).response.error_code == 0


def test_large_groups_get_their_view_at_load(monkeypatch):
    monkeypatch.setattr(shard_module, "WARM_SPEC_MIN_MEMBERS", 3)
    live = make_shard()
    records = []
    for m in ("a", "b", "c"):
        records += live.handle(join("g", m), 1).records
    records += live.handle(join("small", "x"), 1).records

    loaded = GroupCoordinatorShard(CoordinatorConfig(consumer_assignors=("uniform",)), image=image(foo=6, bar=3))
    for r in records:
        loaded.replay(r)
    loaded.on_loaded(10)
    group = loaded.state.groups["g"]
    assert group.spec_cache and not group.spec_dirty
    assert group.spec_cache == fresh(group, loaded.image)
    assert not loaded.state.groups["small"].spec_cache  # below the threshold: built when first needed


def test_the_view_lists_members_in_member_id_order_give_or_take_recent_joiners():
    """Assignors sort the member ids; handing them ids already in order makes that sort cheap.
    Joiners are appended, and the view is put back in order once they are a sixteenth of it."""
    import random

    rnd = random.Random(5)
    ids = [f"{rnd.getrandbits(64):016x}" for _ in range(40)]
    shard = make_shard()
    for i, m in enumerate(ids[:32]):
        assert shard.handle(join("g", m), i).response.error_code == 0
    group = shard.state.groups["g"]
    group.spec_cache = {}  # as after a metadata change: built again, in order
    specs = target._member_specs(group, shard.image)
    assert list(specs) == sorted(ids[:32])
    group.spec_cache, group.spec_dirty = specs, set()

    assert shard.handle(join("g", ids[32]), 100).response.error_code == 0  # one joiner: 1/33, appended
    assert list(group.spec_cache) == sorted(ids[:32]) + [ids[32]]
    assert shard.handle(join("g", ids[33]), 101).response.error_code == 0  # two of 34: still appended
    assert list(group.spec_cache) == sorted(ids[:32]) + [ids[32], ids[33]]
    assert shard.handle(join("g", ids[34]), 102).response.error_code == 0  # three of 35 > 1/16: in order again
    assert list(group.spec_cache) == sorted(ids[:35])
    assert group.spec_cache == fresh(group, shard.image)


def test_the_group_describer_counts_partitions_by_the_hashes_it_is_given():
    """The coordinator's describer answers `partition_counts_hashed` as `partition_counts`:
    unknown topics -1, an id equal to a known one but another object found."""
    import uuid

    known = [uuid.UUID(int=i * 7919) for i in range(1, 6)]
    img = MetadataImage.of(TopicImage(f"t{i}", t, i + 1) for i, t in enumerate(known))
    describer = target.GroupTopicDescriber(img, "g", None)
    asked = [known[3], uuid.UUID(int=12345), known[0], uuid.UUID(int=known[1].int)]
    assert describer.partition_counts_hashed(asked, list(map(hash, asked))) == describer.partition_counts(asked)
    assert describer.partition_counts(asked) == [4, -1, 1, 2]
