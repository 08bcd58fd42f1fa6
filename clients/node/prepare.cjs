// Run by npm's "prepare" step, also when a project installs this folder with
// `npm install /path/to/distlock/clients/node`: npm then links the folder instead of copying
// it (the client reads distlock's Lua files two folders up, so it must stay where it is) and
// does not install the folder's own dependencies. Install them here, from the lockfile, once.
const { existsSync } = require("node:fs");
const { execFileSync } = require("node:child_process");

if (!existsSync(`${__dirname}/node_modules/ioredis/package.json`)) {
  const npm = process.env.npm_execpath;
  const [command, args] = npm ? [process.execPath, [npm]] : ["npm", []];
  console.error("distlock-client: installing its dependencies (npm ci --omit=dev)");
  execFileSync(command, [...args, "ci", "--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund"], {
    cwd: __dirname,
    stdio: "inherit",
  });
}
