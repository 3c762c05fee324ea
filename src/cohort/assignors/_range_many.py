"""The range assignor's answer for many fresh groups at once, on numpy.

Without static members, `RangeAssignor.assign` gives a homogeneous group, per co-partitioned set
of topics (those with the same partition count), one of two answers:

* plain ranges: members in id order, the first n % k take n // k + 1 partitions each and the rest
  n // k, contiguous from partition 0. That is arithmetic on the partition id.
* KIP-881's rack matching, when it can help (`_range_racks.needs_racks`): `rack_runs_small`'s
  owners. Its greedy walks the partitions (several topics: each goes to the lowest subscriber with
  room on a rack hosting it in every topic) or the subscribers (a lone topic: each takes its
  rack's lowest untaken partitions up to its room), then hands out what is left in range
  fashion. Every step of those walks depends on the one before within a group, but not across
  groups, so here each step advances every group of the batch at once.

Racks are numbers below `MAX_RACKS` within a group: members carry theirs (-1: none), partitions a
bitmask of the racks hosting a replica. Member positions are bits of an int64 too, so a racked
group of more than `MAX_MEMBERS` members, or with a topic of more than `MAX_PARTITIONS`
partitions (the walk takes one step per partition), is left to `assign`.
"""

from __future__ import annotations

import numpy as np

from cohort.assignors._arrays import ranges

MAX_RACKS = 62
MAX_MEMBERS = 62
MAX_PARTITIONS = 256


def range_owners(member_counts, topic_group, partition_counts, member_racks, partition_racks):
    """(owner of every partition, whether each group was assigned), in the layout of
    `cohort.assignors.api.FreshGroups`; groups not assigned get owners -1."""
    topic_group = np.asarray(topic_group, np.int64)
    counts = np.asarray(partition_counts, np.int64)
    owner, done = _owners(np.asarray(member_counts, np.int64), topic_group, counts,
                          np.asarray(member_racks, np.int64), np.asarray(partition_racks, np.int64))
    owner[~done[np.repeat(topic_group, counts)]] = -1
    return owner, done


def _owners(k, topic_group, counts, member_racks, masks):
    """`range_owners`, with whatever owners plain ranges give the groups left to `assign`."""
    t_off = np.concatenate(([0], np.cumsum(counts)))
    topic = np.repeat(np.arange(len(counts)), counts)
    pid = np.arange(len(topic)) - t_off[topic]
    group = topic_group[topic]
    n, members = counts[topic], k[group]
    quota, extra = n // members, n % members
    longer = extra * (quota + 1)  # partitions in the first `extra` runs, one longer each
    owner = np.where(pid < longer, pid // (quota + 1), extra + (pid - longer) // np.maximum(quota, 1))
    done = np.ones(len(k), bool)

    member_group = np.repeat(np.arange(len(k)), k)
    racked = np.bincount(member_group, weights=member_racks >= 0, minlength=len(k)) > 0
    if not racked.any():
        return owner, done
    biggest = np.zeros(len(k), np.int64)
    np.maximum.at(biggest, topic_group, counts)
    strange = np.bincount(member_group, weights=member_racks >= MAX_RACKS, minlength=len(k)) > 0
    done[racked & ((k > MAX_MEMBERS) | (biggest > MAX_PARTITIONS) | strange)] = False

    # Co-partitioned sets of the racked groups taken: topics of one group with one partition count.
    rt = np.flatnonzero((racked & done)[topic_group])
    if not len(rt):
        return owner, done
    rt = rt[np.lexsort((counts[rt], topic_group[rt]))]  # stable: a set's topics stay in name order
    new_set = np.ones(len(rt), bool)
    new_set[1:] = (topic_group[rt[1:]] != topic_group[rt[:-1]]) | (counts[rt[1:]] != counts[rt[:-1]])
    set_start = np.flatnonzero(new_set)
    set_of_topic = np.cumsum(new_set) - 1

    # KIP-881 applies to a set when, for one of its topics, the partitions' racks differ and some
    # member's rack hosts a replica.
    g_of = topic_group[rt]
    m_off = np.concatenate(([0], np.cumsum(k)))
    rack_bit = np.where(member_racks >= 0, np.left_shift(1, np.clip(member_racks, 0, MAX_RACKS - 1)), 0)
    member_bits = np.zeros(len(k), np.int64)
    present = k > 0
    member_bits[present] = np.bitwise_or.reduceat(rack_bit, m_off[:-1][present]) if len(rack_bit) else 0
    starts = t_off[:-1]  # every topic has a partition
    union = np.bitwise_or.reduceat(masks, starts)[rt]
    same = (np.minimum.reduceat(masks, starts) == np.maximum.reduceat(masks, starts))[rt]
    wants = ~same & ((union & member_bits[g_of]) != 0)
    needs = np.logical_or.reduceat(wants, set_start)
    if not needs.any():
        return owner, done

    # The sets that need racks, as slots (set, partition); per slot, the racks common to its topics.
    sets = np.flatnonzero(needs)
    set_topics = np.diff(np.append(set_start, len(rt)))[sets]
    set_group = g_of[set_start[sets]]
    set_n = counts[rt[set_start[sets]]]
    chosen = needs[set_of_topic]
    topics, which = rt[chosen], np.cumsum(needs)[set_of_topic[chosen]] - 1
    slot_start = np.concatenate(([0], np.cumsum(set_n)))
    part = ranges(t_off[topics], counts[topics])
    slot = ranges(slot_start[which], counts[topics])
    order = np.argsort(slot, kind="stable")
    common = np.bitwise_and.reduceat(masks[part][order], np.flatnonzero(np.diff(np.append(-1, slot[order]))))

    slot_owner = np.full(len(common), -1, np.int64)
    several = set_topics > 1
    for chosen_sets, walk in ((np.flatnonzero(several), _by_partition), (np.flatnonzero(~several), _by_subscriber)):
        if len(chosen_sets):
            at = ranges(slot_start[chosen_sets], set_n[chosen_sets])
            slot_owner[at] = walk(set_n[chosen_sets], k[set_group[chosen_sets]], m_off[set_group[chosen_sets]],
                                  member_racks, common[at])
    owner[part] = slot_owner[slot]
    return owner, done


def _by_partition(n, k, m_off, member_racks, common) -> np.ndarray:
    """Owner position of every slot of co-partitioned sets: partition by partition, the lowest
    subscriber with room on a rack hosting it (or without a rack); the rest in range fashion."""
    sets = len(n)
    slot_start = np.concatenate(([0], np.cumsum(n)))
    set_of_slot = np.repeat(np.arange(sets), n)
    # Per slot, the subscribers that match it, as bits of their positions.
    pairs = k[set_of_slot]
    pos = ranges(np.zeros(len(pairs), np.int64), pairs)
    pair_slot = np.repeat(np.arange(len(common)), pairs)
    rack = member_racks[m_off[set_of_slot][pair_slot] + pos]
    hit = (rack < 0) | ((common[pair_slot] >> np.maximum(rack, 0)) & 1).astype(bool)
    first_pair = np.concatenate(([0], np.cumsum(pairs)[:-1]))
    matching = np.bitwise_or.reduceat(np.where(hit, np.left_shift(1, pos), 0), first_pair)

    base, extra = n // k, n % k
    cap = base + (extra > 0)
    open_ = np.left_shift(1, k) - 1
    count = np.zeros((sets, int(k.max())), np.int64)
    owner = np.full(len(common), -1, np.int64)
    by_size = np.argsort(-n, kind="stable")  # the sets still walking are a prefix of this order
    sizes = n[by_size]
    for p in range(int(sizes[0])):
        live = by_size[: np.searchsorted(-sizes, -p, side="left")]
        at = slot_start[live] + p
        bits = matching[at] & open_[live]
        took = bits != 0
        live, at, bits = live[took], at[took], bits[took]
        if not len(live):
            continue
        low = bits & -bits
        who = np.frexp(low.astype(np.float64))[1].astype(np.int64) - 1
        owner[at] = who
        count[live, who] += 1
        got = count[live, who]
        full = got == cap[live]
        open_[live[full]] ^= low[full]
        over = live[got > base[live]]
        extra[over] -= 1
        spent = over[extra[over] == 0]
        if len(spent):
            cap[spent] = base[spent]
            # The extra slots are gone: open again to everyone below the base quota.
            under = (count[spent] < base[spent, None]) & (np.arange(count.shape[1]) < k[spent, None])
            open_[spent] = (under * np.left_shift(1, np.arange(count.shape[1]))).sum(axis=1)
    _fill(owner, set_of_slot, k, base, extra, count)
    return owner


def _by_subscriber(n, k, m_off, member_racks, hosted) -> np.ndarray:
    """Owner position of every partition of lone topics: subscriber by subscriber, the lowest
    untaken partitions on its rack (any, without a rack) up to its room; the rest in range fashion."""
    sets = len(n)
    base, extra = n // k, n % k
    count = np.zeros((sets, int(k.max())), np.int64)
    owner = np.full(len(hosted), -1, np.int64)
    # Sets laid out by member count, descending: those with a subscriber at position q are a prefix.
    by_size = np.argsort(-k, kind="stable")
    sizes = k[by_size]
    laid_n = n[by_size]
    start = np.concatenate(([0], np.cumsum(n)))
    slots = ranges(start[by_size], laid_n)
    set_of = np.repeat(by_size, laid_n)
    mask = hosted[slots]
    untaken = np.ones(len(slots), bool)
    set_end = np.cumsum(laid_n)
    for q in range(int(sizes[0])):
        live_sets = int(np.searchsorted(-sizes, -q, side="left"))
        live = by_size[:live_sets]
        width = int(set_end[live_sets - 1])
        s = set_of[:width]
        rack = member_racks[m_off[s] + q]
        room = (base + (extra > 0))[s]
        want = untaken[:width] & ((rack < 0) | ((mask[:width] >> np.maximum(rack, 0)) & 1).astype(bool))
        seen = np.cumsum(want)
        before = np.repeat(np.concatenate(([0], seen[set_end[: live_sets - 1] - 1])), laid_n[:live_sets])
        take = want & (seen - before <= room)
        untaken[:width] &= ~take
        owner[slots[:width][take]] = q
        got = np.bincount(s[take], minlength=sets)[live]
        count[live, q] = got
        extra[live[got > base[live]]] -= 1
    _fill(owner, np.repeat(np.arange(sets), n), k, base, extra, count)
    return owner


def _fill(owner, set_of_slot, k, base, extra, count) -> None:
    """Range fashion for what matching left: subscribers in order take the lowest untaken slots of
    their set, up to their room (`rack_runs_small`'s last loop)."""
    free = np.flatnonzero(owner < 0)
    if not len(free):
        return
    left = np.bincount(set_of_slot[free], minlength=len(k))
    takes = np.zeros_like(count)
    for q in range(count.shape[1]):
        before = count[:, q]
        room = np.where(k > q, base + (extra > 0) - before, 0)
        taken = np.clip(np.minimum(room, left), 0, None)
        extra -= (before <= base) & (base < before + taken)
        left -= taken
        takes[:, q] = taken
    who = np.searchsorted(np.cumsum(takes.ravel()), np.arange(len(free)), side="right")
    owner[free] = who % count.shape[1]
