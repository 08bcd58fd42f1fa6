// LockClient and Lock: distlock's lock protocol (docs/protocol.md) on ioredis, one server or a
// Cluster. Acquire, wait (in distlock's queue: first come, first served with Python processes),
// release, extend, the fencing token, and holder metadata the Django admin shows.
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { basename } from "node:path";
import { isMainThread, threadId } from "node:worker_threads";
import Redis, { ReplyError } from "ioredis";

import { lockKeys, validateName } from "./keys.js";
import { DEFAULT_SCRIPTS_DIR, loadScript } from "./scripts.js";

// The protocol's constants (docs/protocol.md, "Waiting").
export const HANDOFF_GRACE_MS = 250; // how long a waiter handed the lock has to claim it
// What a grant must have left of its lease to count: 1% of it for the clocks' rates, and 2 ms
// for Redis' millisecond expiry (distlock.backends.base.DRIFT_FACTOR and DRIFT_MS).
export const DRIFT_FACTOR = 0.01;
export const DRIFT_MS = 2;
const PATIENCE_MARGIN_MS = 1000; // a registration outlives the wait that renews it by this
const SLACK_MS = 1; // a BLPOP not answered this long after its timeout is ended by the client
const MAX_NUDGE_PAUSE_MS = 8; // the longest pause between two commands that end a late BLPOP

/** The local time (ms) a lease of `ttlMs` begun no earlier than `started` lasts at least until,
 * on a clock up to DRIFT_FACTOR slow, with DRIFT_MS for Redis' millisecond expiry. */
const leaseEnd = (started, ttlMs) => started + ttlMs * (1 - DRIFT_FACTOR) - DRIFT_MS;
const PURPOSE_MAX_LENGTH = 200;
// What a KEY_PREFIX may not hold (docs/protocol.md, "Keys"): braces, wildcards, the control
// characters, and white space as the protocol defines it (Python's str.isspace(); not
// JavaScript's \s, which also takes U+FEFF).
const PREFIX_FORBIDDEN = /[{}*?[\]\u0000-\u0020\u007f\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]/u;
const MAX_LEASE_SECONDS = 10 * 365 * 24 * 3600; // 315360000000 ms: every lease ends

export class LockError extends Error {
  constructor(message, name) {
    super(message);
    this.name = new.target.name;
    this.lockName = name;
  }
}
/** release() or extend() of a lock this object does not hold (any more). */
export class LockNotOwned extends LockError {}
/** A call that got no reply within its bound (the read timeout, or the connect timeout). */
export class TimeoutError extends Error {
  constructor(message) {
    super(message);
    this.name = new.target.name;
  }
}

// The ioredis options the protocol's error path needs (docs/protocol.md, "The error path":
// one attempt per call, bounded in time, no offline queue, nothing resent), set over the
// caller's redisOptions: a call that fails is never sent again by the library, a connection
// that failed is never reconnected (the next call opens a new one), and no command waits in a
// queue for a connection to come back. ioredis' defaults do all three (20 retries per
// command, the offline queue, a reconnect for ever, and the unanswered commands sent again
// after it).
const ONE_ATTEMPT = {
  lazyConnect: true, // connected by ready(), within the connect timeout
  maxRetriesPerRequest: 0,
  autoResendUnfulfilledCommands: false,
  enableOfflineQueue: false,
  retryStrategy: () => null,
  reconnectOnError: () => false,
};

/** A connection to distlock's Redis: makes Lock objects, and runs their scripts. */
export class LockClient {
  /**
   * @param {object} options
   * @param {string} [options.url] one server: redis://[:password@]host:port/db (rediss:// for TLS)
   * @param {string[]} [options.cluster] a Cluster: the URLs of some of its nodes
   * @param {string} [options.prefix] the KEY_PREFIX of the distlock alias ("distlock")
   * @param {number} [options.ttl] default lease in seconds (60)
   * @param {number} [options.maxBlock] longest single blocking wait, seconds (1; at most half
   *   the read timeout)
   * @param {number} [options.timeout] the read timeout R, seconds (2): a call with no reply
   *   this long (a wait's pipeline: its block + R) fails, and its connection is dropped
   * @param {number} [options.connectTimeout] the connect timeout C, seconds (2)
   * @param {string} [options.scriptsDir] distlock's lua folder (default: this repository's)
   * @param {object} [options.redisOptions] passed on to ioredis (but for the options that
   *   would retry, resend or queue a call: those are always off)
   */
  constructor({
    url,
    cluster,
    prefix = "distlock",
    ttl = 60,
    maxBlock = 1,
    timeout = 2,
    connectTimeout = 2,
    scriptsDir,
    redisOptions = {},
  } = {}) {
    if (!url === !cluster) throw new TypeError("Give either url (one server) or cluster (node URLs).");
    // A brace would move the Cluster hash tag into the prefix (docs/protocol.md, "Keys").
    if (typeof prefix !== "string" || !prefix || PREFIX_FORBIDDEN.test(prefix)) {
      throw new RangeError(`prefix must be a KEY_PREFIX without braces, spaces or wildcards; got ${JSON.stringify(prefix)}.`);
    }
    this.prefix = prefix;
    this.ttl = checkSeconds("ttl", ttl, false);
    this.timeoutMs = checkSeconds("timeout", timeout, false) * 1000;
    this.connectTimeoutMs = checkSeconds("connectTimeout", connectTimeout, false) * 1000;
    // protocol.md, "BLPOP and the read timeout": MAX_BLOCK <= R / 2.
    this.maxBlockMs = Math.min(checkSeconds("maxBlock", maxBlock, false) * 1000, this.timeoutMs / 2);
    const options = { ...redisOptions, ...ONE_ATTEMPT, connectTimeout: this.connectTimeoutMs };
    this.newConnection = cluster
      ? () =>
          new Redis.Cluster(cluster.map(nodeOf), {
            lazyConnect: true,
            clusterRetryStrategy: () => null, // no reconnect loop
            retryDelayOnFailover: 0, // a call whose node connection closed is not sent again
            redisOptions: { ...optionsOf(cluster[0]), ...options, lazyConnect: false, enableOfflineQueue: true },
          })
      : () => new Redis(url, options);
    this.redis = this.newConnection(); // the connection of the one-shot calls (replaced when dropped)
    this.connecting = null; // the promise of this.redis being ready
    const folder = scriptsDir || DEFAULT_SCRIPTS_DIR;
    this.scripts = {};
    for (const name of ["acquire", "release", "extend", "leave_queue", "inspect"]) {
      this.scripts[name] = loadScript(folder, name);
    }
    this.idle = []; // connections free for a blocking wait (one per wait in progress)
  }

  /** Return a Lock on `name` (not acquired yet). */
  lock(name, { ttl = this.ttl, wait = null, purpose } = {}) {
    if (wait !== null) checkSeconds("wait", wait, true);
    return new Lock(this, validateName(name), checkSeconds("ttl", ttl, false), wait, purpose);
  }

  /** Acquire `name`, run `fn(lock)`, release; return what `fn` returned (or throw, if the
   * lock could not be acquired within `wait`). */
  async withLock(name, options, fn) {
    const lock = this.lock(name, options);
    if (!(await lock.acquire())) {
      throw new LockError(`Lock ${JSON.stringify(name)} is held by someone else.`, name);
    }
    try {
      return await fn(lock);
    } finally {
      await lock.release();
    }
  }

  /** Return who holds `name` ({token, fencingToken, acquiredAt, ttlRemaining, host, pid,
   * thread, purpose, renewals, depth, waiters}), {shared: true} while shared holders (readers,
   * a Python feature) hold it, or null when nobody does. */
  async holder(name) {
    const keys = this.keys(validateName(name));
    const reply = await this.run("inspect", [keys.lock, keys.live], []);
    if (reply.length === 0) return null;
    if (reply.length === 1) return { shared: true }; // ['~']: the shared marker
    const [value, pttl, , waiters] = reply;
    const [token, fence, acquired, renewals, depth, ...meta] = value.split(" ");
    return {
      token,
      fencingToken: BigInt(fence),
      acquiredAt: new Date(Number(acquired)),
      ttlRemaining: Math.max(pttl, 0) / 1000,
      ...JSON.parse(meta.join(" ") || "{}"),
      renewals: Number(renewals),
      depth: Number(depth),
      waiters: Number(waiters),
    };
  }

  keys(name) {
    return lockKeys(this.prefix, name);
  }

  /** Return `full`, the ARGV of a call of script `name` in their long form, less the last ones
   * the loaded file marks optional (its default is what they say): older files get them all. */
  argv(name, full) {
    return full.slice(0, this.scripts[name].leastArgv);
  }

  /** Run script `name` with EVALSHA, sending its text (EVAL) when the server lacks it. Each
   * call is sent once, on a ready connection, and fails after the read timeout without a
   * reply (that connection dropped: docs/protocol.md, "The error path"). */
  async run(name, keys, args) {
    const script = this.scripts[name];
    const connection = await this.ready();
    const R = this.timeoutMs;
    try {
      return await this.bounded(connection, connection.evalsha(script.sha, keys.length, ...keys, ...args), R);
    } catch (error) {
      if (!String(error.message).startsWith("NOSCRIPT")) throw error;
      return await this.bounded(connection, connection.eval(script.source, keys.length, ...keys, ...args), R);
    }
  }

  /** The connection of the one-shot calls, ready: the one in use, or a new one, connected
   * within the connect timeout (one attempt). A dropped or closed connection is never used
   * again. */
  async ready() {
    if (this.redis.status === "ready") return this.redis;
    if (this.redis.status === "end" || this.redis.status === "close") this.drop(this.redis);
    if (this.connecting === null) this.connecting = this.connect(this.redis);
    return await this.connecting;
  }

  /** Connect `connection` (lazy) within the connect timeout; return it. A connection that
   * failed to connect (an error reply too, such as a wrong password) is dropped. */
  async connect(connection) {
    let cause = null; // why it closed (ioredis reports "Connection is closed." for all)
    connection.on("error", (error) => {
      cause = error; // each failure reaches the call that met it
    });
    try {
      await this.bounded(connection, connection.connect(), this.connectTimeoutMs);
    } catch (error) {
      this.drop(connection);
      throw error instanceof TimeoutError || cause === null ? error : cause;
    }
    return connection;
  }

  /** `promise` (a call on `connection`), or a TimeoutError once `ms` passed without its reply.
   * On any failure but an error reply (a timeout, a closed connection) the connection is
   * dropped: a late reply stays unread and nothing sent on it is sent again. */
  async bounded(connection, promise, ms) {
    let timer;
    const expired = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new TimeoutError(`No reply within ${ms} ms.`)), ms);
    });
    try {
      return await Promise.race([promise, expired]);
    } catch (error) {
      if (!(error instanceof ReplyError)) this.drop(connection);
      throw error;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Close `connection` for good; the next one-shot call opens a new one if it was theirs. */
  drop(connection) {
    connection.disconnect();
    if (connection === this.redis) {
      this.redis = this.newConnection();
      this.connecting = null;
    }
  }

  /** Block up to `blockMs` on list `wake` and run script `name` right behind, pipelined on a
   * connection of its own: the server runs the script the moment a release wakes the waiter,
   * so the reply that wakes it says whether it holds the lock (one round trip). */
  async waitThenRun(wake, blockMs, name, keys, args) {
    const script = this.scripts[name];
    let connection = this.idle.pop();
    while (connection && connection.status !== "ready") {
      connection.disconnect(); // closed while idle
      connection = this.idle.pop();
    }
    connection = connection || (await this.connect(this.newConnection()));
    let replies;
    const pending = connection
      .pipeline()
      .blpop(wake, Math.max(blockMs / 1000, 0.001).toFixed(3))
      .evalsha(script.sha, keys.length, ...keys, ...args)
      .exec();
    const stopNudging = endOnTime(connection, wake, blockMs);
    try {
      // The pipeline's bound is its block + R. On a failure bounded() drops the connection
      // before the error path gives back (protocol.md, "The error path"): the pending EVALSHA
      // is never sent again and its late reply never read.
      replies = await this.bounded(connection, pending, blockMs + this.timeoutMs);
    } finally {
      stopNudging();
    }
    this.idle.push(connection);
    const [, [error, reply]] = replies;
    // NOSCRIPT (a restarted server) or a moved slot: ask again the usual way; the lock a
    // release reserved for this waiter is kept for it for HANDOFF_GRACE_MS.
    return error ? await this.run(name, keys, args) : reply;
  }

  /** Close every connection (QUIT, within the read timeout; a connection that does not
   * answer is dropped). */
  async close() {
    const open = [this.redis, ...this.idle.splice(0)].filter((connection) => connection.status === "ready");
    if (this.redis.status !== "ready") this.redis.disconnect(); // never connected, or connecting
    await Promise.all(open.map((connection) => this.bounded(connection, connection.quit(), this.timeoutMs).catch(() => {})));
  }
}

/** One lock name, acquired by one holder at a time; each acquire draws a new token. */
export class Lock {
  constructor(client, name, ttl, wait, purpose) {
    this.client = client;
    this.name = name;
    this.ttl = ttl;
    this.wait = wait;
    this.metadata = holderMetadata(purpose);
    this.token = null; // set while this object holds the lock
    this.fencingToken = null; // BigInt: greater than every earlier holder's of this name
    this.leaseEnd = 0; // performance.now() the server's lease lasts at least until
  }

  /** Seconds this object can count on its lease, by this process's monotonic clock and
   * without a round trip (0 when it does not hold the lock): the server's lease never ends
   * before it while this clock runs within 1% of the server's, however long acquire waited. */
  leaseLeft() {
    if (this.token === null) return 0;
    return Math.max(this.leaseEnd - performance.now(), 0) / 1000;
  }

  /**
   * Acquire the lock, waiting up to `wait` seconds (null: until acquired, 0: try once);
   * return true if acquired. A waiter joins the lock's queue and is handed the lock by the
   * release before it (from Python or Node.js alike), first come, first served.
   */
  async acquire({ wait = this.wait } = {}) {
    if (this.token !== null) throw new LockError(`This Lock already holds ${JSON.stringify(this.name)}.`, this.name);
    const attempt = new Attempt(this, wait === null ? null : checkSeconds("wait", wait, true));
    let reply;
    try {
      reply = await attempt.first();
      while (typeof reply !== "string") {
        const block = attempt.nextBlock(reply);
        if (block === null) {
          await attempt.leave();
          return false;
        }
        reply = await attempt.waitThenClaim(block);
      }
    } catch (error) {
      // The server may have granted it, or reserved it for this token, before the reply was
      // lost: give back a hold, then leave the queue (a reservation is handed on at once).
      if (await attempt.giveBack()) await attempt.leave().catch(() => {});
      throw error;
    }
    this.token = attempt.token;
    this.fencingToken = BigInt(reply.split(" ")[0]);
    this.leaseEnd = attempt.leaseEnd;
    return true;
  }

  /** Release the lock and hand it to the longest waiter; throw LockNotOwned if this object
   * does not hold it (any more: its lease ended, or an operator force released it). */
  async release() {
    const keys = this.client.keys(this.name);
    const released = await this.client.run(
      "release",
      [keys.lock, keys.queue, keys.live, keys.index],
      this.client.argv("release", [this.ownToken("release"), this.name, "1", HANDOFF_GRACE_MS]),
    );
    this.token = null; // after the server answered: a lost reply leaves the token to retry with
    if (released === 0) throw this.notOwned("release");
  }

  /** Set the lease back to `ttl` seconds (default: the lock's ttl) from now. */
  async extend(ttl = this.ttl) {
    const keys = this.client.keys(this.name);
    const ttlMs = Math.round(checkSeconds("ttl", ttl, false) * 1000);
    const sent = performance.now();
    const extended = await this.client.run("extend", [keys.lock, keys.index], [this.ownToken("extend"), ttlMs, this.name, "0", "0", ""]);
    if (extended !== 1) {
      this.token = null;
      throw this.notOwned("extend");
    }
    this.leaseEnd = leaseEnd(sent, ttlMs);
  }

  ownToken(action) {
    if (this.token === null) throw this.notOwned(action);
    return this.token;
  }

  notOwned(action) {
    return new LockNotOwned(
      `Cannot ${action} ${JSON.stringify(this.name)}: this Lock does not hold it (its lease ` +
        "ended, or it was force released). Acquire it again.",
      this.name,
    );
  }
}

/** One acquire() call: its token, its deadline, and the steps of docs/protocol.md's
 * "Waiting for a lock". Times are this process's monotonic clock (performance.now(), ms). */
class Attempt {
  constructor(lock, wait) {
    this.lock = lock;
    this.client = lock.client;
    this.keys = this.client.keys(lock.name);
    this.acquireKeys = [this.keys.lock, this.keys.fence, this.keys.queue, this.keys.live, this.keys.index];
    this.token = randomBytes(16).toString("hex"); // 128 random bits, never reused
    this.ttlMs = Math.round(lock.ttl * 1000);
    this.queued = wait !== 0;
    this.deadline = wait === null ? Infinity : performance.now() + wait * 1000;
    this.clock = null; // [a local time, the server's ms read after it]: relates the two
  }

  /** How long the server keeps this waiter registered: until the next call can renew it. */
  patience() {
    if (!this.queued) return 0;
    const block = Math.min(this.deadline - performance.now(), this.client.maxBlockMs);
    return Math.round(Math.max(block, 0) + PATIENCE_MARGIN_MS);
  }

  // Current files of acquire.lua tell by themselves whether the token waited, and default
  // the grace: the two go out only to older files, which need them.
  args(waited) {
    const lock = this.lock;
    const full = [this.token, this.ttlMs, lock.metadata, lock.name, this.patience(), waited ? "1" : "0", HANDOFF_GRACE_MS];
    return this.client.argv("acquire", full);
  }

  async first() {
    return this.checked(performance.now(), await this.client.run("acquire", this.acquireKeys, this.args(false)));
  }

  /** BLPOP on this waiter's wake-up list with acquire.lua pipelined behind it. */
  async waitThenClaim(blockMs) {
    const sent = performance.now();
    const wake = `${this.keys.queue}:${this.token}`;
    return this.checked(sent, await this.client.waitThenRun(wake, blockMs, "acquire", this.acquireKeys, this.args(true)));
  }

  /** Return how long (ms) to block for a turn after a "held" reply, or null to give up. */
  nextBlock([, holderPttl, place]) {
    const remaining = this.deadline - performance.now();
    if (remaining <= 0) return null;
    // Wake when the holder's lease ends at the latest: a crashed holder never releases.
    const block = Math.min(remaining, Math.max(holderPttl, 1) + 2, this.client.maxBlockMs);
    // Next in line after a waiter that may have died with the lock handed to it.
    return place === 1 ? Math.min(block, HANDOFF_GRACE_MS) : block;
  }

  /** Return `reply`, or a "held" reply when a grant came with no lease left to use (a slow
   * reply; less than the drift allowance, 1% of the lease + 2 ms, as distlock counts it):
   * that hold is given back, never reported as acquired. */
  async checked(sent, reply) {
    if (typeof reply !== "string") {
      if (this.clock === null && reply.length > 3) this.clock = [sent, Number(reply[3])];
      return reply;
    }
    const acquiredMs = Number(reply.split(" ")[1]);
    const now = performance.now();
    // The server's time since the clock pair, counted at 1 - DRIFT_FACTOR on this clock (which
    // may run that much slower): a local time no later than the server began the lease.
    const waitedMs = this.clock ? (acquiredMs - this.clock[1]) * (1 - DRIFT_FACTOR) : 0;
    const projected = this.clock ? Math.max(sent, this.clock[0] + waitedMs - 1) : sent;
    // Later than now, with the reply here: the server's clock (a wall clock) stepped forward
    // during the wait (NTP, a VM's clock set after a pause), so the lease counts from the send.
    const started = projected > now ? sent : projected;
    this.leaseEnd = leaseEnd(started, this.ttlMs);
    if (now < this.leaseEnd) return reply;
    await this.giveBack();
    return [0, 0, -1];
  }

  async leave() {
    if (!this.queued) return;
    const args = this.client.argv("leave_queue", [this.token, HANDOFF_GRACE_MS]);
    await this.client.run("leave_queue", [this.keys.lock, this.keys.queue, this.keys.live], args);
  }

  /** Release whatever this token may hold; return whether the server answered. */
  async giveBack() {
    const keys = this.keys;
    const release = this.client.argv("release", [this.token, this.lock.name, "1", HANDOFF_GRACE_MS]);
    return this.client
      .run("release", [keys.lock, keys.queue, keys.live, keys.index], release)
      .then(() => true, () => false);
  }
}

/** End a BLPOP on time (docs/protocol.md, "Ending a BLPOP on time"): the server ends a
 * blocked command's timeout on its hz timer (100 ms late at hz 10), but also whenever it wakes
 * for a command. So SLACK_MS after the block, with no reply yet, send a command on the blocked
 * connection itself, then again after 2, 4, 8, 8... ms. EXISTS of the wake-up list rather
 * than PING: it is routed by its key, so on a Cluster it reaches the node that blocks (ioredis
 * sends a PING to any node). Its reply comes after the pipeline's and is dropped. */
function endOnTime(connection, wake, blockMs) {
  let timer;
  let stopped = false;
  const nudge = (pause, next) => {
    timer = setTimeout(() => {
      if (stopped) return;
      connection.exists(wake).catch(() => {}); // the pipeline's own error is the one reported
      nudge(next, Math.min(next * 2, MAX_NUDGE_PAUSE_MS));
    }, pause);
  };
  nudge(blockMs + SLACK_MS, 2);
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

/** The JSON stored beside the lock: who holds it, where and why (the admin shows it). */
export function holderMetadata(purpose) {
  const command = ["node", basename(process.argv[1] || ""), ...process.argv.slice(2)].join(" ").trim();
  const text = Array.from(purpose || shorten(command)).slice(0, PURPOSE_MAX_LENGTH).join("");
  return JSON.stringify({
    host: hostname(),
    pid: process.pid,
    thread: isMainThread ? "main" : `worker ${threadId}`,
    purpose: text,
  });
}

function shorten(text, limit = 80) {
  const line = text.split(/\s+/).join(" ");
  return line.length <= limit ? line : line.slice(0, limit - 3) + "...";
}

function checkSeconds(what, value, zeroAllowed) {
  const tooSmall = zeroAllowed ? value < 0 : !(value >= 0.001); // leases are whole ms
  const tooLarge = !zeroAllowed && value > MAX_LEASE_SECONDS; // a lease, not a wait
  if (typeof value !== "number" || !Number.isFinite(value) || tooSmall || tooLarge) {
    const bound = zeroAllowed ? ">= 0" : `from 0.001 to ${MAX_LEASE_SECONDS}`;
    throw new RangeError(`${what} is seconds, a finite number ${bound}; got ${String(value)}.`);
  }
  return value;
}

function nodeOf(url) {
  const { hostname: host, port } = new URL(url);
  return { host, port: Number(port || 6379) };
}

function optionsOf(url) {
  const { username, password, protocol } = new URL(url);
  return {
    ...(username ? { username: decodeURIComponent(username) } : {}),
    ...(password ? { password: decodeURIComponent(password) } : {}),
    ...(protocol === "rediss:" ? { tls: {} } : {}),
  };
}
