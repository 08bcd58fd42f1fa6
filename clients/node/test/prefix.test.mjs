// A KEY_PREFIX with a brace would move the Cluster hash tag (docs/protocol.md, "Keys"): the
// client refuses it, as distlock's settings check does (distlock.E008).
import assert from "node:assert/strict";
import { test } from "node:test";

import { LockClient } from "../index.js";

const offline = { url: "redis://127.0.0.1:1/0", redisOptions: { lazyConnect: true } };

for (const prefix of ["a{b", "}", "{}", "with space", "star*", "", "tab\t"]) {
  test(`the prefix ${JSON.stringify(prefix)} is refused`, () => {
    assert.throws(() => new LockClient({ ...offline, prefix }), RangeError);
  });
}

test("a plain prefix is taken", () => {
  const client = new LockClient({ ...offline, prefix: "myproject:locks" });
  assert.equal(client.keys("a").lock, "myproject:locks:{b0579}:lock:a");
  client.redis.disconnect();
});
