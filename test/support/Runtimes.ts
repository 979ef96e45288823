/**
 * The runtimes the client kit claims besides browsers and the Node running the tests, for its
 * test, from the npm registry: Bun and Deno (the packages `bun` and `deno` carry their binaries)
 * and the oldest Node its `engines` admits (the package `node`). Installed on first use into a
 * cache directory outside the checkout, as .ci/run installs Node 24, so that `npm test` needs
 * nothing but Node and the registry, and `npm ci` does not fetch three runtimes (about 300 MB)
 * for one test. The versions are pinned.
 */
import { execFile, spawnSync } from "node:child_process"
import { existsSync, mkdirSync, renameSync, rmSync, writeFileSync } from "node:fs"
import { homedir } from "node:os"
import { join } from "node:path"
import { promisify } from "node:util"

export const RUNTIME_VERSIONS = { bun: "1.4.5", deno: "2.9.6", node: "22.4.0" } as const
export type Runtime = keyof typeof RUNTIME_VERSIONS

const CACHE = join(
  process.env["XDG_CACHE_HOME"] ?? join(homedir(), ".cache"),
  "author-directory-service",
  `runtimes-${Object.entries(RUNTIME_VERSIONS).map(([name, version]) => `${name}-${version}`).join("-")}`
)

const binary = (dir: string, runtime: Runtime) => join(dir, "node_modules", ".bin", runtime)

/** Every binary runs and reports its pinned version. */
const works = (dir: string) =>
  (Object.keys(RUNTIME_VERSIONS) as Array<Runtime>).every((runtime) => {
    if (!existsSync(binary(dir, runtime))) return false
    const result = spawnSync(binary(dir, runtime), ["--version"], { encoding: "utf8", timeout: 60_000 })
    return result.status === 0 && result.stdout.includes(RUNTIME_VERSIONS[runtime])
  })

const install = async (): Promise<void> => {
  const staging = `${CACHE}.tmp-${process.pid}`
  rmSync(staging, { recursive: true, force: true })
  mkdirSync(staging, { recursive: true })
  try {
    // npm 11 runs a dependency's install scripts only when the project allows them: these put the
    // platform's binary in place.
    writeFileSync(join(staging, "package.json"), JSON.stringify({
      name: "author-directory-test-runtimes",
      private: true,
      dependencies: RUNTIME_VERSIONS,
      allowScripts: { bun: true, deno: true, node: true }
    }))
    await promisify(execFile)("npm", ["install", "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error"], {
      cwd: staging,
      timeout: 600_000,
      maxBuffer: 16 * 1024 * 1024
    })
    if (!works(staging)) throw new Error(`${JSON.stringify(RUNTIME_VERSIONS)} were installed in ${staging} but do not all run`)
    // Moved into place whole; another test run may have done so first, with the same versions.
    if (existsSync(CACHE) && !works(CACHE)) rmSync(CACHE, { recursive: true, force: true })
    try {
      renameSync(staging, CACHE)
    } catch (error) {
      if (!works(CACHE)) throw error
    }
  } finally {
    rmSync(staging, { recursive: true, force: true })
  }
}

let installed: Promise<void> | undefined

/** The path of `runtime`'s binary, installed first if the cache does not hold a working one. */
export const runtimeBinary = async (runtime: Runtime): Promise<string> => {
  installed ??= works(CACHE) ? Promise.resolve() : install()
  await installed
  return binary(CACHE, runtime)
}
