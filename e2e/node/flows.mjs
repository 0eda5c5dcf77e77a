// The official Node.js client's flows against one broker, the way applications use it:
// normal, FIFO, delay (and recall), transactions, POP receive/ack/change-invisible,
// retries into the dead-letter queue, tag filters. The broker tests
// (broker/tests/messaging/test_node_client.py) start it against a broker with the
// topics and groups of broker/tests/messaging/conftest.py and judge what it prints:
// one JSON line per flow, {"flow": ..., "ok": true|false, "detail": ...}.
//
//   node flows.mjs '{"endpoints": "127.0.0.1:8081", "only": ["normal"]}'
//
// A flow that fails prints why and the next one runs; the exit code is 0 unless the
// arguments are wrong, so the test reports every flow at once.
import { Producer, SimpleConsumer, FilterExpression } from 'rocketmq-client-nodejs';

const args = JSON.parse(process.argv[2] ?? '{}');
if (!args.endpoints) {
  console.error(`flows.mjs: missing "endpoints" in ${process.argv[2]}`);
  process.exit(2);
}
const quiet = { info() {}, warn() {}, error() {}, debug() {} };
const common = { endpoints: args.endpoints, namespace: '', requestTimeout: 10000, logger: quiet };
const print = (line) => process.stdout.write(JSON.stringify(line) + '\n');
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const tag = `n${process.pid}`; // bodies of this run, told apart from any other

function check(condition, detail) {
  if (!condition) throw new Error(detail);
}

async function withProducer(topics, fn, checker) {
  const producer = new Producer({ ...common, topic: topics, checker });
  await producer.startup();
  try {
    return await fn(producer);
  } finally {
    await producer.shutdown();
  }
}

async function withConsumer(group, topic, filter, fn) {
  const consumer = new SimpleConsumer({
    ...common,
    consumerGroup: group,
    subscriptions: new Map([[topic, filter ?? FilterExpression.SUB_ALL]]),
    awaitDuration: 2000,
  });
  await consumer.startup();
  try {
    return await fn(consumer);
  } finally {
    await consumer.shutdown();
  }
}

// Receive (acknowledging each message unless told not to) until `want` arrived or
// `timeoutMs` passed; what arrived, in order.
async function drain(consumer, want, { timeoutMs = 30000, ack = true, invisibleMs = 15000 } = {}) {
  const got = [];
  const deadline = Date.now() + timeoutMs;
  while (got.length < want && Date.now() < deadline) {
    const batch = await consumer.receive(16, invisibleMs);
    for (const message of batch) {
      got.push(message);
      if (ack) await consumer.ack(message);
    }
  }
  return got;
}

const bodyOf = (m) => m.body.toString();

const flows = {
  async normal() {
    const sent = await withProducer(['plain'], async (p) => {
      const ids = new Set();
      for (let i = 0; i < 20; i++) {
        const receipt = await p.send({ topic: 'plain', body: Buffer.from(`${tag}-${i}`), keys: [`k${i}`] });
        ids.add(receipt.messageId);
      }
      return ids;
    });
    const got = await withConsumer('g-simple', 'plain', null, (c) => drain(c, sent.size));
    const ids = new Set(got.map((m) => m.messageId));
    check([...sent].every((id) => ids.has(id)), `received ${ids.size} of ${sent.size}`);
    return `${sent.size} sent, ${got.length} received and acknowledged`;
  },

  async fifo() {
    const groups = ['a', 'b', 'c'];
    await withProducer(['ordered'], async (p) => {
      for (let i = 0; i < 10; i++) {
        for (const g of groups) {
          await p.send({ topic: 'ordered', body: Buffer.from(`${g}:${i}`), messageGroup: `${tag}-${g}` });
        }
      }
    });
    const got = await withConsumer('g-fifo', 'ordered', null, (c) => drain(c, 30, { timeoutMs: 60000 }));
    check(got.length === 30, `received ${got.length} of 30`);
    for (const g of groups) {
      const order = got.map(bodyOf).filter((b) => b.startsWith(`${g}:`)).map((b) => Number(b.split(':')[1]));
      check(order.join() === [...Array(10).keys()].join(), `group ${g} out of order: ${order}`);
    }
    return '3 message groups of 10, each in order';
  },

  async delay() {
    const due = Date.now() + 3000;
    const { kept, recalled } = await withProducer(['later'], async (p) => {
      const kept = await p.send({ topic: 'later', body: Buffer.from(`${tag}-on-time`), deliveryTimestamp: new Date(due) });
      const gone = await p.send({
        topic: 'later', body: Buffer.from(`${tag}-never`), deliveryTimestamp: new Date(due + 1000),
      });
      check(gone.recallHandle, 'no recall handle on a delay message');
      const recalled = await p.recallMessage('later', gone.recallHandle);
      return { kept, recalled };
    });
    check(recalled.messageId, 'the recall answered no message id');
    const got = await withConsumer('g-later', 'later', null, (c) => drain(c, 1, { timeoutMs: 30000 }));
    const arrived = Date.now();
    check(got.length === 1 && got[0].messageId === kept.messageId, `received ${got.map(bodyOf)}`);
    check(arrived >= due, `delivered ${due - arrived} ms early`);
    const late = await withConsumer('g-later', 'later', null, (c) => drain(c, 1, { timeoutMs: 6000 }));
    check(late.length === 0, `the recalled message came: ${late.map(bodyOf)}`);
    return `delivered ${arrived - due} ms after its time; the recalled one never`;
  },

  async transaction() {
    const checker = { async check() { return 0; } }; // unknown: the test ends every one
    const committed = await withProducer(['txn'], async (p) => {
      const t1 = p.beginTransaction();
      const receipt = await p.send({ topic: 'txn', body: Buffer.from(`${tag}-commit`) }, t1);
      const t2 = p.beginTransaction();
      await p.send({ topic: 'txn', body: Buffer.from(`${tag}-rollback`) }, t2);
      await t1.commit();
      await t2.rollback();
      return receipt.messageId;
    }, checker);
    const got = await withConsumer('g-txn', 'txn', null, async (c) => {
      const first = await drain(c, 1);
      const more = await drain(c, 1, { timeoutMs: 5000 });
      return [...first, ...more];
    });
    check(got.length === 1 && got[0].messageId === committed, `received ${got.map(bodyOf)}`);
    return 'the committed half delivered, the rolled back one never';
  },

  async pop() {
    await withProducer(['simple'], async (p) => {
      for (let i = 0; i < 5; i++) await p.send({ topic: 'simple', body: Buffer.from(`${tag}-${i}`) });
    });
    const detail = await withConsumer('g-simple', 'simple', null, async (c) => {
      const first = await drain(c, 5, { ack: false });
      check(first.length === 5, `received ${first.length} of 5`);
      const [keep, ...rest] = first;
      for (const m of rest) await c.ack(m);
      await c.changeInvisibleDuration(keep, 1000); // back in a second
      const again = await drain(c, 1, { ack: false, timeoutMs: 30000 });
      check(again.length === 1 && again[0].messageId === keep.messageId, 'not redelivered');
      check(again[0].deliveryAttempt === 2, `attempt ${again[0].deliveryAttempt}`);
      await c.ack(again[0]);
      const none = await drain(c, 1, { timeoutMs: 4000 });
      check(none.length === 0, `delivered after its ack: ${none.map(bodyOf)}`);
      return 'receive, ack, change-invisible: redelivered once with attempt 2';
    });
    return detail;
  },

  async deadLetter() {
    const id = await withProducer(['doomed'], async (p) =>
      (await p.send({ topic: 'doomed', body: Buffer.from(`${tag}-poison`) })).messageId);
    const attempts = await withConsumer('g-dlq', 'doomed', null, async (c) => {
      const seen = [];
      const deadline = Date.now() + 40000;
      while (seen.length < 2 && Date.now() < deadline) {
        for (const m of await c.receive(1, 1000)) seen.push(m.deliveryAttempt); // never acked
      }
      return seen;
    });
    check(attempts.join() === '1,2', `attempts ${attempts}`);
    const dlq = await withConsumer('g-dlq-reader', '%DLQ%g-dlq', null, (c) => drain(c, 1, { timeoutMs: 40000 }));
    check(dlq.length === 1 && bodyOf(dlq[0]) === `${tag}-poison`, `DLQ held ${dlq.map(bodyOf)}`);
    return `attempts ${attempts}, then in %DLQ%g-dlq (message ${id})`;
  },

  async filter() {
    await withProducer(['filtered'], async (p) => {
      for (let i = 0; i < 10; i++) {
        await p.send({ topic: 'filtered', body: Buffer.from(`${tag}-${i}`), tag: i % 2 ? 'red' : 'blue' });
      }
    });
    const got = await withConsumer('g-tag', 'filtered', new FilterExpression('red'), async (c) => {
      const first = await drain(c, 5);
      const more = await drain(c, 1, { timeoutMs: 4000 });
      return [...first, ...more];
    });
    const numbers = got.map((m) => Number(bodyOf(m).split('-').pop())).sort((a, b) => a - b);
    check(numbers.join() === '1,3,5,7,9', `received ${numbers}`);
    return 'tag red: the 5 red of 10';
  },
};

for (const [name, flow] of Object.entries(flows)) {
  if (args.only && !args.only.includes(name)) continue;
  const began = Date.now();
  try {
    const detail = await flow();
    print({ flow: name, ok: true, detail, seconds: (Date.now() - began) / 1000 });
  } catch (err) {
    print({ flow: name, ok: false, detail: String(err?.stack ?? err), seconds: (Date.now() - began) / 1000 });
  }
}
process.exit(0);
