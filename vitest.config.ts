import { availableParallelism } from "node:os"
import { defineConfig } from "vitest/config"

// Generous on purpose: a test waits for events (test/support/Eventually.ts), never for time, so a
// loaded machine (two busy cores) only makes it slower; these bounds only end a test that hangs.
export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 120_000,
    hookTimeout: 180_000,
    pool: "forks",
    // At least two test files at a time, even on two cores (Vitest's default there is one): most files
    // spend much of their time waiting on processes they started (the service, PostgreSQL, Redis,
    // npm), so a second file uses what the first leaves idle. Measured on a 2-core machine with the
    // Redis Cluster and Sentinel suites: 1,539 s one at a time, 1,008 s two at a time.
    maxWorkers: Math.max(2, availableParallelism() - 1),
    globalSetup: ["test/support/globalSetup.ts"]
  }
})
