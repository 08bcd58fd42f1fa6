// The protocol's test vectors (distlock/backends/redis_ops/lua/vectors.json; docs/protocol.md,
// "Test vectors"): this client derives every key and every script SHA1 as the file says.
// `node --test clients/node/test/`; DISTLOCK_VECTORS names another vectors file.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { bucketOf, crc32, encodeName, lockKeys, validateName } from "../lib/keys.js";
import { DEFAULT_SCRIPTS_DIR, loadScript } from "../lib/scripts.js";
import { LockClient } from "../index.js";

const file = process.env.DISTLOCK_VECTORS || join(DEFAULT_SCRIPTS_DIR, "vectors.json");
const vectors = JSON.parse(readFileSync(file, "utf8"));

test("the vectors cover names and scripts", () => {
  assert.ok(vectors.names.length > 0);
  assert.ok(Object.keys(vectors.scripts).length > 0);
});

for (const v of vectors.names) {
  test(`keys of ${JSON.stringify(v.name.slice(0, 40))} under ${v.prefix}`, () => {
    const bytes = new TextEncoder().encode(validateName(v.name));
    assert.equal(Array.from(v.name).length, v.code_points);
    assert.equal(Buffer.from(bytes).toString("hex"), v.utf8_hex);
    assert.equal(crc32(bytes), v.crc32);
    assert.equal(bucketOf(v.name), v.bucket);
    assert.equal(encodeName(v.name), v.encoded);
    const keys = lockKeys(v.prefix, v.name);
    assert.equal(keys.lock.split("{")[1].split("}")[0], v.hash_tag);
    assert.deepEqual(
      {
        lock: keys.lock,
        fence: keys.fence,
        wait: keys.queue,
        live: keys.live,
        held: keys.index,
        about: `${keys.queue}|about`,
        wake: `${keys.queue}:${vectors.token}`,
      },
      {
        lock: v.keys.lock,
        fence: v.keys.fence,
        wait: v.keys.wait,
        live: v.keys.live,
        held: v.keys.held,
        about: v.keys.about,
        wake: v.keys.wake,
      },
    );
  });
}

test("every script's SHA1, includes expanded", () => {
  const found = {};
  for (const name of Object.keys(vectors.scripts)) found[name] = loadScript(DEFAULT_SCRIPTS_DIR, name).sha;
  assert.deepEqual(found, vectors.scripts);
});

// The negative vectors: what a client MUST refuse before it sends anything. (This client
// takes no token from its caller: release() and extend() use the Lock's own.)
const refuse = vectors.refuse;
const offline = { url: "redis://127.0.0.1:1/0", redisOptions: { lazyConnect: true } };

test("the vectors list what to refuse", () => {
  for (const list of ["names", "prefixes", "accepted_prefixes", "leases_ms", "accepted_leases_ms"]) {
    assert.ok(refuse[list].length > 0, list);
  }
});

for (const { name, why } of refuse.names) {
  test(`the name ${JSON.stringify(name.slice(0, 20))} is refused (${why})`, () => {
    assert.throws(() => validateName(name), RangeError);
  });
}

for (const { prefix, why } of refuse.prefixes) {
  test(`the prefix ${JSON.stringify(prefix)} is refused (${why})`, () => {
    assert.throws(() => new LockClient({ ...offline, prefix }), RangeError);
  });
}

test("the accepted prefixes and leases are taken", () => {
  for (const prefix of refuse.accepted_prefixes) {
    const client = new LockClient({ ...offline, prefix });
    for (const ms of refuse.accepted_leases_ms) client.lock("a", { ttl: ms / 1000 });
    client.redis.disconnect();
  }
});

test("the leases out of range are refused", () => {
  const client = new LockClient(offline);
  for (const ms of refuse.leases_ms) {
    assert.throws(() => client.lock("a", { ttl: ms / 1000 }), RangeError, String(ms));
  }
  client.redis.disconnect();
});
