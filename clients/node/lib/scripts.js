// The Lua scripts, read from distlock's own files (docs/protocol.md, "Scripts"): each file's
// `-- #include "include/x.lua"` lines replaced by that file's text, relative to the including
// file, so that the SHA1 digest EVALSHA names is the one every other client computes.
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const INCLUDE = /^[ \t]*-- #include "([\w/]+\.lua)"[ \t]*$/gm;

// This folder sits in distlock's repository: clients/node/lib -> distlock/backends/redis_ops/lua.
// Elsewhere, point DISTLOCK_LUA_DIR (or the client's `scriptsDir` option) at the `lua` folder
// of an installed distlock (site-packages/distlock/backends/redis_ops/lua).
export const DEFAULT_SCRIPTS_DIR =
  process.env.DISTLOCK_LUA_DIR ||
  resolve(dirname(fileURLToPath(import.meta.url)), "../../../distlock/backends/redis_ops/lua");

/** Return `text` (of a file in `folder`) with every include line expanded, recursively. */
export function expand(folder, text, including = []) {
  return text.replace(INCLUDE, (_line, path) => {
    if (including.includes(path)) {
      throw new Error(`${path} includes itself: ${including.join(" -> ")}`);
    }
    const file = join(folder, path);
    const part = readFileSync(file, "utf8");
    return expand(dirname(file), part, [...including, path]).replace(/\n+$/, "");
  });
}

/** Return script `name` ({name, source, sha}) from `folder`, its includes expanded. */
export function loadScript(folder, name) {
  const file = join(folder, `${name}.lua`);
  let text;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    throw new Error(
      `Cannot read ${file} (${error.code}): set the scriptsDir option or DISTLOCK_LUA_DIR ` +
        "to the lua folder of distlock (distlock/backends/redis_ops/lua).",
    );
  }
  const source = expand(folder, text);
  const sha = createHash("sha1").update(source, "utf8").digest("hex");
  return { name, source, sha, leastArgv: leastArgv(text) };
}

// A header's ARGV line; "optional" first in what it says marks one a call may leave out.
const ARGV_LINE = /^-- ARGV\[(\d+)\]\s+\w+\s+(optional)?/gm;

/** The fewest ARGV a call of a file's script sends: those before the run of optional ones
 * that ends its header (docs/protocol.md, Compatibility). Older files mark none optional. */
export function leastArgv(text) {
  const optional = [...text.matchAll(ARGV_LINE)].map((found) => found[2] !== undefined);
  while (optional.length > 0 && optional[optional.length - 1]) optional.pop();
  return optional.length;
}
