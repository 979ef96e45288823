/**
 * Whether an external program is on `PATH`, for tests that need one `npm test` cannot assume on a
 * fresh machine (only Node.js is installed there). `.ci/run` installs them, so CI
 * still runs what such a guard (`describe.runIf(onPath("redis-server"))`) would leave out.
 */
import { spawnSync } from "node:child_process"

export const onPath = (program: string): boolean => spawnSync("sh", ["-c", `command -v '${program.replaceAll("'", "")}'`], { stdio: "ignore" }).status === 0
