import { defineConfig } from "vitest/config"

// Generous on purpose: a test waits for events (test/support/Eventually.ts), never for time, so a
// loaded machine (two busy cores) only makes it slower; these bounds only end a test that hangs.
export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 120_000,
    hookTimeout: 180_000,
    pool: "forks",
    globalSetup: ["test/support/globalSetup.ts"]
  }
})
