// How a lock's name becomes its Redis keys (docs/protocol.md, "Keys"; distlock/keys.py).
export const LAYOUT_VERSION = 2;
export const BUCKETS = 1024;
export const MAX_NAME_LENGTH = 1024;
// Bytes kept as they are in a key: ASCII letters, digits and these; every other UTF-8 byte
// is written %XX (upper-case hex), as Python's urllib.parse.quote(name, safe=...) does.
const SAFE = new Set(Array.from("-._~:/@+=,_"));
const FORBIDDEN = /[\u0000-\u001f\u007f-\u009f\ud800-\udfff\u2028\u2029]/u;

const CRC_TABLE = (() => {
  const table = new Int32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c;
  }
  return table;
})();

/** Return the CRC-32 (zlib's, IEEE 802.3) of `bytes`, an unsigned 32-bit number. */
export function crc32(bytes) {
  let crc = -1;
  for (const byte of bytes) crc = CRC_TABLE[(crc ^ byte) & 0xff] ^ (crc >>> 8);
  return (crc ^ -1) >>> 0;
}

/** Return `name` if it can name a lock, else throw an Error saying why. */
export function validateName(name) {
  if (typeof name !== "string") throw new TypeError("A lock name must be a string.");
  const length = Array.from(name).length; // code points, as Python counts them
  if (length === 0) throw new RangeError("A lock name cannot be empty.");
  if (length > MAX_NAME_LENGTH) {
    throw new RangeError(`A lock name is at most ${MAX_NAME_LENGTH} characters; this one has ${length}.`);
  }
  const found = FORBIDDEN.exec(name);
  if (found) {
    throw new RangeError(
      `Lock name ${JSON.stringify(name.slice(0, 80))} contains a control character at ` +
        `position ${found.index}; use printable text.`,
    );
  }
  return name;
}

/** Return `name` percent-encoded, safe as the tail of a key. */
export function encodeName(name) {
  let out = "";
  for (const byte of new TextEncoder().encode(name)) {
    const char = String.fromCharCode(byte);
    const plain = byte < 0x80 && (/[A-Za-z0-9]/.test(char) || SAFE.has(char));
    out += plain ? char : "%" + byte.toString(16).toUpperCase().padStart(2, "0");
  }
  return out;
}

/** Return the bucket (0..1023) of `name`: CRC-32 of its UTF-8 bytes, modulo 1024. */
export function bucketOf(name) {
  return crc32(new TextEncoder().encode(name)) % BUCKETS;
}

/** Return every key of lock `name` under `prefix` (all in one Cluster hash slot). */
export function lockKeys(prefix, name) {
  const tag = `${prefix}:{b${String(bucketOf(name)).padStart(4, "0")}}`;
  const encoded = encodeName(name);
  return {
    lock: `${tag}:lock:${encoded}`,
    fence: `${tag}:fence`,
    queue: `${tag}:wait:${encoded}`,
    live: `${tag}:live:${encoded}`,
    index: `${tag}:held`,
  };
}
