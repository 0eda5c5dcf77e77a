// Drain a topic with the official Node.js SimpleConsumer, acknowledging every message,
// the way an application's receive loop does. The e2e tests (e2e/local) start it and
// read what it prints: one JSON line per receive, then one summary line.
//
//   node drain.mjs '{"endpoints": "...", "group": "...", "topic": "...",
//                    "expected": 1000, "timeoutS": 120, "awaitMs": 3000,
//                    "batch": 32, "invisibleMs": 30000}'
//
// `endpoints` is one access point: the Node.js client 1.0.8 hands its whole text to
// grpc-js as a single target, so "a;b" does not resolve; routes name the other groups.
// It stops once `expected` distinct messages arrived (or at `timeoutS`), and exits 0
// either way: judging what arrived is the test's job. A failed receive or ack is
// printed as a line of its own and the loop goes on, as an application's would.
import { SimpleConsumer } from 'rocketmq-client-nodejs';

const args = JSON.parse(process.argv[2] ?? '{}');
for (const key of ['endpoints', 'group', 'topic', 'expected']) {
  if (args[key] === undefined) {
    console.error(`drain.mjs: missing "${key}" in ${process.argv[2]}`);
    process.exit(2);
  }
}
const timeoutS = args.timeoutS ?? 120;
const print = (line) => process.stdout.write(JSON.stringify(line) + '\n');
const quiet = { info() {}, warn() {}, error() {}, debug() {} };

const consumer = new SimpleConsumer({
  endpoints: args.endpoints,
  namespace: '',
  consumerGroup: args.group,
  subscriptions: new Map([[args.topic, '*']]),
  awaitDuration: args.awaitMs ?? 3000,
  requestTimeout: 3000,
  logger: quiet,
});

let stopping = false;
process.on('SIGTERM', () => { stopping = true; });

await consumer.startup();
const seen = new Set();
const began = Date.now();
let receives = 0;
let errors = 0;
while (!stopping && seen.size < args.expected && Date.now() - began < timeoutS * 1000) {
  const at = Date.now();
  let messages;
  try {
    messages = await consumer.receive(args.batch ?? 32, args.invisibleMs ?? 30000);
  } catch (err) {
    errors += 1;
    print({ error: String(err?.message ?? err).split('\n')[0], at: (at - began) / 1000 });
    await new Promise((resolve) => setTimeout(resolve, 200));
    continue;
  }
  receives += 1;
  const ids = [];
  for (const message of messages) {
    try {
      await consumer.ack(message);
      ids.push(message.messageId);
      seen.add(message.messageId);
    } catch (err) {
      errors += 1;
      print({ ackError: String(err?.message ?? err).split('\n')[0], id: message.messageId });
    }
  }
  print({ at: (at - began) / 1000, took: (Date.now() - at) / 1000, ids });
}
print({
  done: true,
  distinct: seen.size,
  receives,
  errors,
  seconds: (Date.now() - began) / 1000,
});
await consumer.shutdown();
process.exit(0);
