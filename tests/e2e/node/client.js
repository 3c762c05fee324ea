// kafkajs against cohort, driven by tests/e2e/test_classic_clients.py.
//   node client.js produce <broker> <topic> <partitions> <first> <count>
//     writes values "v<i>" to partition i % partitions, then exits
//   node client.js consume <broker> <topic> <group> <client id>
//     joins <group> (classic protocol), prints one JSON line per message and per assignment,
//     commits each message's offset before taking the next; SIGTERM leaves the group and exits 0
"use strict";
const { Kafka, logLevel } = require("kafkajs");

const [mode, broker, topic, ...rest] = process.argv.slice(2);
const kafka = new Kafka({ clientId: "kafkajs-e2e", brokers: [broker], logLevel: logLevel.NOTHING,
                          retry: { retries: 10, initialRetryTime: 100 } });
const out = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

async function produce(partitions, first, count) {
  const producer = kafka.producer();
  await producer.connect();
  const messages = [];
  for (let i = first; i < first + count; i++) {
    messages.push({ partition: i % partitions, value: "v" + i });
  }
  await producer.send({ topic, acks: -1, messages });
  await producer.disconnect();
  out({ produced: count });
}

async function consume(group, clientId) {
  const consumer = new Kafka({ clientId, brokers: [broker], logLevel: logLevel.NOTHING,
                               retry: { retries: 10, initialRetryTime: 100 } })
    .consumer({ groupId: group, sessionTimeout: 6000, rebalanceTimeout: 10000, heartbeatInterval: 300,
                maxWaitTimeInMs: 100 });
  consumer.on(consumer.events.GROUP_JOIN, (e) => {
    const parts = e.payload.memberAssignment[topic] || [];
    out({ assigned: parts.slice().sort((a, b) => a - b), member: e.payload.memberId });
  });
  let stopping = false;
  process.on("SIGTERM", async () => {
    if (stopping) return;
    stopping = true;
    await consumer.disconnect();  // commits, then LeaveGroup
    process.exit(0);
  });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ partition, message }) => {
      await consumer.commitOffsets([{ topic, partition, offset: (BigInt(message.offset) + 1n).toString() }]);
      out({ partition, offset: Number(message.offset), value: message.value.toString() });
    },
  });
  out({ running: true });
}

(async () => {
  if (mode === "produce") {
    await produce(Number(rest[0]), Number(rest[1]), Number(rest[2]));
    process.exit(0);
  } else if (mode === "consume") {
    await consume(rest[0], rest[1]);
  } else {
    throw new Error("mode must be produce or consume");
  }
})().catch((err) => {
  process.stderr.write(String(err && err.stack || err) + "\n");
  process.exit(1);
});
