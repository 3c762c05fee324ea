// kafkajs over SASL_SSL with SCRAM-SHA-512, driven by tests/e2e/test_security_clients.py.
//   node secure.js <broker> <ca file> <user> <password> <topic> <count>
// produces "k<i>" values, reads them back with a consumer group, prints {"read": [...]}, exits 0;
// an authentication failure prints {"error": "<type>: <message>"} and exits 1.
"use strict";
const fs = require("fs");
const { Kafka, logLevel } = require("kafkajs");

const [broker, ca, username, password, topic, count] = process.argv.slice(2);
const kafka = new Kafka({
  clientId: "kafkajs-secure", brokers: [broker], logLevel: logLevel.NOTHING,
  ssl: { ca: [fs.readFileSync(ca, "utf-8")], servername: "localhost" },
  sasl: { mechanism: "scram-sha-512", username, password },
  retry: { retries: 2, initialRetryTime: 100 },
});

async function main() {
  const n = Number(count);
  const producer = kafka.producer();
  await producer.connect();
  const messages = [];
  for (let i = 0; i < n; i++) messages.push({ partition: 0, value: "k" + i });
  await producer.send({ topic, acks: -1, messages });
  await producer.disconnect();
  const consumer = kafka.consumer({ groupId: "kafkajs-secure", sessionTimeout: 6000, heartbeatInterval: 300,
                                    maxWaitTimeInMs: 100 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const read = [];
  await new Promise((resolve) => {
    consumer.run({ eachMessage: async ({ message }) => {
      read.push(message.value.toString());
      if (read.length >= n) resolve();
    } });
  });
  await consumer.disconnect();
  process.stdout.write(JSON.stringify({ read }) + "\n");
}

main().then(() => process.exit(0)).catch((e) => {
  process.stdout.write(JSON.stringify({ error: `${e.name}: ${e.message}` }) + "\n");
  process.exit(1);
});
