// This client as a conformance client: `node clients/node/conformance.mjs` speaks the line
// protocol of distlock's conformance runner (tests/conformance/README.md) on stdin/stdout:
//   python -m tests.conformance -- node clients/node/conformance.mjs
// Configured by DISTLOCK_URL, DISTLOCK_KEY_PREFIX, DISTLOCK_SCRIPTS and DISTLOCK_CLUSTER.
// The client takes exclusive locks only (it respects shared ones), so it claims "exclusive".
import { createInterface } from "node:readline";

import { LockClient, LockNotOwned } from "./index.js";

const url = process.env.DISTLOCK_URL;
const client = new LockClient({
  ...(process.env.DISTLOCK_CLUSTER === "1" ? { cluster: [url] } : { url }),
  prefix: process.env.DISTLOCK_KEY_PREFIX || "distlock",
  scriptsDir: process.env.DISTLOCK_SCRIPTS || undefined,
});
const held = new Map(); // token -> Lock

const ops = {
  hello: async () => ({ client: "distlock-client (Node.js) 0.1.0", features: ["exclusive"] }),

  async acquire({ name, ttl_ms, wait_ms, shared, purpose }) {
    if (shared) throw new Error("shared holds are not supported by this client");
    const lock = client.lock(name, { ttl: ttl_ms / 1000, purpose: purpose ?? undefined });
    if (!(await lock.acquire({ wait: wait_ms === null ? null : wait_ms / 1000 }))) return { acquired: false };
    held.set(lock.token, lock);
    return { acquired: true, token: lock.token, fencing: String(lock.fencingToken) };
  },

  async release({ token }) {
    const lock = held.get(token);
    held.delete(token);
    return { released: await settled(lock, () => lock.release()) };
  },

  async extend({ token, ttl_ms }) {
    const lock = held.get(token);
    return { extended: await settled(lock, () => lock.extend(ttl_ms / 1000)) };
  },

  async holder({ name }) {
    const found = await client.holder(name);
    if (found === null) return { holder: null };
    if (found.shared) return { holder: { token: null, fencing: null, host: null, pid: null, purpose: null, shared: true } };
    const { token, fencingToken, host, pid, purpose } = found;
    return { holder: { token, fencing: String(fencingToken), host, pid, purpose, shared: false } };
  },
};

// True when `call` succeeded, false when the lock was not held by that token (any more).
async function settled(lock, call) {
  if (!lock) return false;
  try {
    await call();
    return true;
  } catch (error) {
    if (error instanceof LockNotOwned) return false;
    throw error;
  }
}

const reader = createInterface({ input: process.stdin });
for await (const line of reader) {
  if (!line.trim()) continue;
  let request = {};
  let reply;
  try {
    request = JSON.parse(line);
    const { id, op, ...fields } = request;
    if (!Object.hasOwn(ops, op)) throw new Error(`unknown op ${JSON.stringify(op)}`);
    reply = { id, ok: true, ...(await ops[op](fields)) };
  } catch (error) {
    reply = { id: request.id ?? null, ok: false, error: String(error?.message ?? error) };
  }
  process.stdout.write(JSON.stringify(reply) + "\n");
}
await client.close();
