// distlock-client: a reference Node.js client of distlock's lock protocol (docs/protocol.md).
export { HANDOFF_GRACE_MS, Lock, LockClient, LockError, LockNotOwned, TimeoutError, holderMetadata } from "./lib/client.js";
export { LAYOUT_VERSION, bucketOf, encodeName, lockKeys, validateName } from "./lib/keys.js";
export { expand, loadScript } from "./lib/scripts.js";
