// The Node.js side of the interop tests: `node node_worker.mjs COMMAND ARGS...`, the twin of
// python_worker.py. DISTLOCK_NODE_URL names one server, DISTLOCK_NODE_CLUSTER (comma
// separated URLs) a Cluster; the key prefix is the tests' ("test"). Prints one line per event.
import { createInterface } from "node:readline";
import { DEFAULT_SCRIPTS_DIR } from "../../clients/node/lib/scripts.js";
import { LockClient, loadScript } from "../../clients/node/index.js";

const cluster = process.env.DISTLOCK_NODE_CLUSTER;
const client = new LockClient({
  ...(cluster ? { cluster: cluster.split(",") } : { url: process.env.DISTLOCK_NODE_URL }),
  prefix: "test",
  maxBlock: 0.5, // as the Python processes (half their socket timeout)
  // The read and connect timeouts, seconds (the error-path tests set short ones).
  ...(process.env.DISTLOCK_NODE_TIMEOUT ? { timeout: Number(process.env.DISTLOCK_NODE_TIMEOUT) } : {}),
  ...(process.env.DISTLOCK_NODE_CONNECT_TIMEOUT
    ? { connectTimeout: Number(process.env.DISTLOCK_NODE_CONNECT_TIMEOUT) }
    : {}),
});
const say = (...words) => console.log(words.join(" "));
const now = () => ((performance.timeOrigin + performance.now()) / 1000).toFixed(6); // wall clock, s
const reader = createInterface({ input: process.stdin });
const lines = reader[Symbol.asyncIterator]();
const nextLine = async () => (await lines.next()).value;

const commands = {
  // Take the lock ITERATIONS times; inside: the shared counter by read-modify-write, an
  // overlap check, and a log line "SEQ FENCE TOKEN HEAD node" (HEAD: the first waiter still
  // registered just before the release, "-" when none waits).
  async counter(name, iterations, logPath) {
    const { appendFileSync } = await import("node:fs");
    const data = client.redis;
    const { queue, live } = client.keys(name);
    say("ready");
    await nextLine(); // everyone starts together
    for (let i = 0; i < Number(iterations); i++) {
      const lock = client.lock(name, { ttl: 10 });
      if (!(await lock.acquire({ wait: null }))) throw new Error("acquire returned false");
      if ((await data.incr("interop:inside")) !== 1) await data.incr("interop:overlaps");
      const value = Number((await data.get("interop:counter")) || 0);
      await data.set("interop:counter", value + 1);
      const seq = await data.incr("interop:seq");
      const head = await firstLiveWaiter(data, queue, live);
      await data.decr("interop:inside");
      appendFileSync(logPath, `${seq} ${lock.fencingToken} ${lock.token} ${head || "-"} node\n`);
      await lock.release();
    }
    say("done");
  },

  // For each line "go" on stdin: wait for the lock, say "acquired TIME", release, say
  // "released".
  async waiter(name) {
    say("ready");
    while ((await nextLine()) === "go") {
      const lock = client.lock(name, { ttl: 5 });
      if (!(await lock.acquire({ wait: 10 }))) throw new Error("not acquired in 10 s");
      say("acquired", now());
      await lock.release();
      say("released");
    }
  },

  // Hold the lock with PURPOSE; on a line "release": say "releasing TIME" and release it.
  async hold(name, ttl, purpose) {
    const lock = client.lock(name, { ttl: Number(ttl), purpose });
    if (!(await lock.acquire({ wait: 10 }))) throw new Error("not acquired in 10 s");
    say("held", lock.fencingToken, lock.token);
    if ((await nextLine()) === "release") {
      say("releasing", now());
      await lock.release();
      say("released");
    }
  },

  // Wait for NAME with this process's monotonic clock running 1% slow (the protocol's budget)
  // and hold a TTL s lease: say "ready", "acquired" once held, then, once the server's key is
  // gone (no renewal), "left SECONDS": what leaseLeft() still counts on. With STALL_MS, a line
  // "stall" on stdin (sent while it waits) stops its clock that long, then it runs on from
  // where it stood ("stalled" said then): the server's clock stepped forward by STALL_MS, as
  // this process sees it (Redis' TIME is the wall clock, which NTP or a VM's host may set).
  async slowwaiter(name, ttl, stallMs = "0") {
    const real = performance.now.bind(performance);
    const base = real();
    let stallAt = Infinity;
    const stood = () => Math.min(Math.max(real() - stallAt, 0), Number(stallMs));
    performance.now = () => base + (real() - stood() - base) * 0.99;
    const lock = client.lock(name, { ttl: Number(ttl) });
    say("ready");
    if (Number(stallMs) > 0) {
      nextLine().then(() => {
        stallAt = real();
        say("stalled");
      });
    }
    if (!(await lock.acquire({ wait: 60 }))) throw new Error("not acquired in 60 s");
    say("acquired");
    while ((await client.holder(name)) !== null) await new Promise((done) => setTimeout(done, 5));
    say("left", lock.leaseLeft());
  },

  // Hold NAME, then time COUNT acquires of it with a wait of WAIT_MS (each fails): print
  // "late MS MS ..." , how long past WAIT_MS each returned (the monotonic clock).
  async late(name, waitMs, count) {
    const holder = client.lock(name, { ttl: 60 });
    if (!(await holder.acquire({ wait: 0 }))) throw new Error(`${name} is held already`);
    const late = [];
    for (let i = 0; i < Number(count); i++) {
      const began = performance.now();
      if (await client.lock(name, { ttl: 60 }).acquire({ wait: Number(waitMs) / 1000 })) {
        throw new Error("acquired a held lock");
      }
      late.push((performance.now() - began - Number(waitMs)).toFixed(1));
    }
    await holder.release();
    say("late", ...late);
  },

  // The error-path tests' commands (test_client_error_path.py; ruby_worker.rb has the same).
  // Take the connections and scripts in use, say "ready"; on "go", time one acquire of NAME
  // with WAIT_MS: say "OUTCOME MS" (acquired, not-acquired or error:CLASS).
  async paused(name, waitMs) {
    await warmUp();
    say("ready");
    await nextLine();
    say(await timedAcquire(name, Number(waitMs)));
  },

  // Hold NAME, say "held TOKEN"; on "go", time its release: say "OUTCOME MS".
  async release(name) {
    await warmUp(); // release.lua loaded: MONITOR sees one EVALSHA per release sent
    const lock = client.lock(name, { ttl: 60 });
    if (!(await lock.acquire({ wait: 0 }))) throw new Error(`${name} is held already`);
    say("held", lock.token);
    await nextLine();
    const began = performance.now();
    const outcome = await lock.release().then(
      () => "released",
      (error) => `error:${error.name}`,
    );
    say(outcome, (performance.now() - began).toFixed(0));
  },

  // On "go", one acquire of NAME (wait 0): "OUTCOME MS"; on "next", three more, each said as
  // "believed TOKEN" or "not-acquired" and released once the test has read the server's holder.
  async lategrant(name) {
    await warmUp();
    say("ready");
    await nextLine();
    say(await timedAcquire(name, 0));
    await nextLine();
    for (let i = 0; i < 3; i++) {
      const lock = client.lock(name, { ttl: 3 });
      let held;
      try {
        held = await lock.acquire({ wait: 0 });
      } catch (error) {
        say(`error:${error.name}`);
        continue;
      }
      say(held ? `believed ${lock.token}` : "not-acquired");
      await nextLine();
      if (held) await lock.release();
    }
    say("done");
  },

  // Print who holds NAME, as JSON ("null" when nobody does).
  async holder(name) {
    const found = await client.holder(name);
    say(JSON.stringify(found, (_, value) => (typeof value === "bigint" ? String(value) : value)));
  },

  // Print the SHA1 of each script file given as JSON, as this client loads it.
  async shas(namesJson) {
    say(JSON.stringify(JSON.parse(namesJson).map((name) => loadScript(DEFAULT_SCRIPTS_DIR, name).sha)));
  },

  // Print the keys of each name given as JSON: {lock, fence, queue, live, index}.
  async keys(namesJson) {
    say(JSON.stringify(JSON.parse(namesJson).map((name) => client.keys(name))));
  },
};

async function warmUp() {
  const lock = client.lock("warm-up", { ttl: 5 });
  if (!(await lock.acquire({ wait: 0 }))) throw new Error("warm-up is held");
  await lock.release();
}

async function timedAcquire(name, waitMs) {
  const began = performance.now();
  const outcome = await client
    .lock(name, { ttl: 10 })
    .acquire({ wait: waitMs / 1000 })
    .then(
      (held) => (held ? "acquired" : "not-acquired"),
      (error) => `error:${error.name}`,
    );
  return `${outcome} ${(performance.now() - began).toFixed(0)}`;
}

// The waiter a release would hand the lock to now: the first queued token whose registration
// (its score in `live`) has not ended by the server's clock (docs/protocol.md, "Waiting").
async function firstLiveWaiter(data, queue, live) {
  const tokens = await data.zrange(queue, 0, 15);
  if (tokens.length === 0) return null;
  const ends = await data.zmscore(live, ...tokens);
  const [seconds, micros] = await data.time();
  const nowMs = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
  return tokens.find((_, i) => ends[i] !== null && Number(ends[i]) > nowMs) || null;
}

const [command, ...args] = process.argv.slice(2);
try {
  await commands[command](...args);
} finally {
  reader.close();
  process.stdin.destroy(); // an open pipe would keep the process alive
  await client.close();
}
