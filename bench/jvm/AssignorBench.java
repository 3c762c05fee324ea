// Times Apache Kafka's own server-side assignors (compiled from Kafka's sources by
// bench/kafka_assignors.py) on the shapes of bench/assignors.py, warm, in this JVM.
//
// Usage: java AssignorBench ASSIGNOR MEMBERS RATIO TOPICS homo|hetero full|incremental CALLS RUNS WARMUP_SECONDS
// Prints one JSON object: per-call CPU of this thread and of the whole process, and wall time, in
// ms, for each timed run in two modes: "steady" (CALLS back-to-back calls per run, as a JMH
// iteration calls the benchmark) and "after_gc" (System.gc(), then one call).
//
// Member ids are Kafka's own (Uuid.randomUuid().toString(): 22 characters of URL-safe base64),
// as its clients generate them; topic ids are random Uuids. The group spec and the topic
// describer are small implementations of Kafka's assignor API here, because Kafka's own
// (GroupSpecImpl's Assignment, TopicMetadata) need its generated record classes: they hold the
// same maps and answer the same lookups as the coordinator's.

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Random;
import java.util.Set;

import org.apache.kafka.common.Uuid;
import org.apache.kafka.coordinator.group.api.assignor.ConsumerGroupPartitionAssignor;
import org.apache.kafka.coordinator.group.api.assignor.GroupAssignment;
import org.apache.kafka.coordinator.group.api.assignor.GroupSpec;
import org.apache.kafka.coordinator.group.api.assignor.MemberAssignment;
import org.apache.kafka.coordinator.group.api.assignor.MemberSubscription;
import org.apache.kafka.coordinator.group.api.assignor.SubscribedTopicDescriber;
import org.apache.kafka.coordinator.group.api.assignor.SubscriptionType;
import org.apache.kafka.coordinator.group.assignor.RangeAssignor;
import org.apache.kafka.coordinator.group.assignor.UniformAssignor;
import org.apache.kafka.coordinator.group.modern.MemberAssignmentImpl;

public final class AssignorBench {
    private static final int BUCKETS = 5;

    /** A member's subscription and current assignment, as the coordinator's spec holds them. */
    static final class Member implements MemberSubscription, MemberAssignment {
        final Set<Uuid> topics;
        final Map<Uuid, Set<Integer>> partitions;

        Member(Set<Uuid> topics, Map<Uuid, Set<Integer>> partitions) {
            this.topics = topics;
            this.partitions = partitions;
        }

        @Override public Optional<String> rackId() { return Optional.empty(); }
        @Override public Optional<String> instanceId() { return Optional.empty(); }
        @Override public Set<Uuid> subscribedTopicIds() { return topics; }
        @Override public Map<Uuid, Set<Integer>> partitions() { return partitions; }
    }

    /** Kafka's GroupSpecImpl: members by id, and who owns each partition now. */
    static final class Spec implements GroupSpec {
        final Map<String, Member> members;
        final SubscriptionType type;
        final Map<Uuid, Map<Integer, String>> owners;

        Spec(Map<String, Member> members, SubscriptionType type, Map<Uuid, Map<Integer, String>> owners) {
            this.members = members;
            this.type = type;
            this.owners = owners;
        }

        @Override public Collection<String> memberIds() { return members.keySet(); }
        @Override public SubscriptionType subscriptionType() { return type; }

        @Override public boolean isPartitionAssigned(Uuid topicId, int partitionId) {
            Map<Integer, String> byPartition = owners.get(topicId);
            return byPartition != null && byPartition.containsKey(partitionId);
        }

        @Override public MemberSubscription memberSubscription(String memberId) {
            Member member = members.get(memberId);
            if (member == null) throw new IllegalArgumentException("Member Id " + memberId + " not found.");
            return member;
        }

        @Override public MemberAssignment memberAssignment(String memberId) {
            Member member = members.get(memberId);
            return member == null ? new MemberAssignmentImpl(Collections.emptyMap()) : member;
        }
    }

    /** Kafka's SubscribedTopicDescriberImpl without racks: partition counts by topic id. */
    static final class Topics implements SubscribedTopicDescriber {
        final Map<Uuid, Integer> counts;

        Topics(Map<Uuid, Integer> counts) { this.counts = counts; }

        @Override public int numPartitions(Uuid topicId) {
            Integer count = counts.get(topicId);
            return count == null ? -1 : count;
        }

        @Override public Set<String> racksForPartition(Uuid topicId, int partition) { return Collections.emptySet(); }
    }

    public static void main(String[] args) {
        ConsumerGroupPartitionAssignor assignor = args[0].equals("range") ? new RangeAssignor() : new UniformAssignor();
        int memberCount = Integer.parseInt(args[1]);
        int ratio = Integer.parseInt(args[2]);
        int topicCount = Integer.parseInt(args[3]);
        boolean heterogeneous = args[4].equals("hetero");
        boolean incremental = args[5].equals("incremental");
        int calls = Integer.parseInt(args[6]);
        int runs = Integer.parseInt(args[7]);
        double warmupSeconds = Double.parseDouble(args[8]);

        List<Uuid> topicIds = new ArrayList<>();
        Map<Uuid, Integer> counts = new HashMap<>();
        int perTopic = memberCount * ratio / topicCount;
        for (int t = 0; t < topicCount; t++) {
            Uuid id = Uuid.randomUuid();
            topicIds.add(id);
            counts.put(id, perTopic);
        }
        Topics topics = new Topics(counts);
        List<Set<Uuid>> subscriptions = subscriptions(topicIds, memberCount, heterogeneous);
        List<String> memberIds = new ArrayList<>();
        for (int i = 0; i < memberCount; i++) memberIds.add(Uuid.randomUuid().toString());
        SubscriptionType type = heterogeneous ? SubscriptionType.HETEROGENEOUS : SubscriptionType.HOMOGENEOUS;

        Map<String, Member> members = new HashMap<>();
        int first = incremental ? memberCount - 1 : memberCount;
        for (int i = 0; i < first; i++) members.put(memberIds.get(i), new Member(subscriptions.get(i), Collections.emptyMap()));
        Spec spec = new Spec(members, type, Collections.emptyMap());
        if (incremental) {  // the previous result is the current assignment; one member joins
            GroupAssignment before = assignor.assign(spec, topics);
            Map<String, Member> next = new HashMap<>();
            Map<Uuid, Map<Integer, String>> owners = new HashMap<>();
            for (Map.Entry<String, Member> entry : members.entrySet()) {
                MemberAssignment got = before.members().get(entry.getKey());
                Map<Uuid, Set<Integer>> held = got == null ? Collections.emptyMap() : Collections.unmodifiableMap(got.partitions());
                next.put(entry.getKey(), new Member(entry.getValue().topics, held));
                for (Map.Entry<Uuid, Set<Integer>> topic : held.entrySet()) {
                    Map<Integer, String> byPartition = owners.computeIfAbsent(topic.getKey(), k -> new HashMap<>());
                    for (Integer p : topic.getValue()) byPartition.put(p, entry.getKey());
                }
            }
            next.put(memberIds.get(memberCount - 1), new Member(subscriptions.get(memberCount - 1), Collections.emptyMap()));
            spec = new Spec(next, type, owners);
        }

        ThreadMXBean threads = ManagementFactory.getThreadMXBean();
        com.sun.management.OperatingSystemMXBean os =
            (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        long sink = 0;
        long warmEnd = System.nanoTime() + (long) (warmupSeconds * 1e9);
        int warmCalls = 0;
        while (System.nanoTime() < warmEnd || warmCalls < 10) {
            sink += assignor.assign(spec, topics).members().size();
            warmCalls++;
        }

        StringBuilder out = new StringBuilder("{\"warmup_calls\": " + warmCalls);
        for (String mode : new String[] {"steady", "after_gc"}) {
            int number = mode.equals("steady") ? calls : 1;
            List<String> thread = new ArrayList<>(), process = new ArrayList<>(), wall = new ArrayList<>();
            for (int r = 0; r < runs; r++) {
                if (mode.equals("after_gc")) System.gc();
                long t0 = threads.getCurrentThreadCpuTime(), p0 = os.getProcessCpuTime(), w0 = System.nanoTime();
                for (int c = 0; c < number; c++) sink += assignor.assign(spec, topics).members().size();
                long t1 = threads.getCurrentThreadCpuTime(), p1 = os.getProcessCpuTime(), w1 = System.nanoTime();
                thread.add(String.valueOf((t1 - t0) / 1e6 / number));
                process.add(String.valueOf((p1 - p0) / 1e6 / number));
                wall.add(String.valueOf((w1 - w0) / 1e6 / number));
            }
            out.append(", \"").append(mode).append("\": {\"thread_cpu_ms\": ").append(thread)
               .append(", \"process_cpu_ms\": ").append(process).append(", \"wall_ms\": ").append(wall).append("}");
        }
        out.append(", \"sink\": ").append(sink).append("}");
        System.out.println(out);
    }

    /** Each member's topics: all of them, or Kafka's bucketed heterogeneous shape (JMH's
     *  createHeterogeneousBucketedMembers): 5 contiguous buckets of members and of topics. */
    static List<Set<Uuid>> subscriptions(List<Uuid> topicIds, int memberCount, boolean heterogeneous) {
        List<Set<Uuid>> result = new ArrayList<>();
        if (!heterogeneous) {
            Set<Uuid> all = new HashSet<>(topicIds);
            for (int i = 0; i < memberCount; i++) result.add(all);
            return result;
        }
        int buckets = Math.min(BUCKETS, memberCount);
        int topicsPerBucket = (topicIds.size() + buckets - 1) / buckets;
        int membersPerBucket = (memberCount + buckets - 1) / buckets;
        List<Set<Uuid>> bucketTopics = new ArrayList<>();
        for (int b = 0; b < buckets; b++) {
            int from = Math.min(b * topicsPerBucket, topicIds.size()), to = Math.min((b + 1) * topicsPerBucket, topicIds.size());
            bucketTopics.add(new HashSet<>(topicIds.subList(from, to)));
        }
        for (int i = 0; i < memberCount; i++) result.add(bucketTopics.get(i / membersPerBucket));
        return result;
    }
}
