// npm runs this "prepare" script after `npm ci` here, before `npm pack`, and
// when another project installs this folder (`npm install
// ../opjournal/client/typescript`). It builds dist/ (dist/src is the
// package), so the folder is importable without a separate build step.
//
// Installing a folder links it and installs nothing in it: its
// dependencies and the compiler (a devDependency) are then missing. This
// script installs them first, here, with `npm ci` (the exact versions of
// package-lock.json; scripts off, so it does not run itself again), so the
// linked package finds its dependencies in its own node_modules.
import { spawnSync } from "node:child_process";
import { existsSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const has = (p) => existsSync(join(root, "node_modules", p));

function run(cmd, args, env = process.env) {
  const r = spawnSync(cmd, args, { cwd: root, stdio: "inherit", env });
  if (r.error) throw r.error;
  if (r.status !== 0) {
    console.error(`@opjournal/client prepare: ${[cmd, ...args].join(" ")} exited with ${r.status ?? r.signal}`);
    process.exit(1);
  }
}

if (!has("typescript/bin/tsc") || !has("@bufbuild/protobuf/package.json") || !has("@connectrpc/connect-node/package.json")) {
  // The outer npm's settings arrive as npm_config_* variables. Keep those
  // that say where and how to fetch; drop the rest (its prefix, --omit=dev,
  // --global, ...), which would point this install at the wrong place or
  // leave the compiler out.
  const keep = /^npm_config_(cache|userconfig|globalconfig|registry|.*:registry|.*_proxy|proxy|noproxy|strict_ssl|cafile|ca|offline|prefer_offline|prefer_online|fetch_.*|loglevel)$/i;
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_config_/i.test(k) || keep.test(k)));
  console.error("@opjournal/client prepare: installing its dependencies and the compiler (npm ci)");
  const npm = process.env.npm_execpath;
  const [cmd, pre] = npm && npm.endsWith(".js") ? [process.execPath, [npm]] : [npm || "npm", []];
  run(cmd, [...pre, "ci", "--include=dev", "--ignore-scripts", "--no-audit", "--no-fund"], env);
}
rmSync(join(root, "dist"), { recursive: true, force: true });
run(process.execPath, [join(root, "node_modules/typescript/bin/tsc"), "-p", join(root, "tsconfig.json")]);
