// Builds the opjournal binary once for a whole `npm test` run and prints its
// path (dist/bin/opjournal), so that the test files, which run in parallel
// processes, do not each build it. `npm test` exports it as OPJOURNAL_BIN.

import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { repoRoot } from "./harness.js";

const out = join(fileURLToPath(new URL("../bin/", import.meta.url)), "opjournal");
execFileSync(process.env["GO"] || "go", ["build", "-o", out, "./cmd/opjournal"], { cwd: repoRoot(), stdio: ["ignore", "ignore", "inherit"] });
process.stdout.write(out + "\n");
