/**
 * Headless Chromium for the browser tests (playwright-core drives the installed browser; nothing is
 * downloaded). The tests run only where it is installed: `/usr/bin/chromium` or `CHROMIUM_PATH`.
 */
import { existsSync } from "node:fs"
import { chromium, type Browser } from "playwright-core"

export type { Browser }

export const CHROMIUM = process.env["CHROMIUM_PATH"] ?? "/usr/bin/chromium"

/** Whether the browser tests can run here (for `describe.runIf`). */
export const hasChromium = existsSync(CHROMIUM)

/** A headless Chromium with no background traffic of its own (updates, sync, first-run pages). */
export const launchChromium = (): Promise<Browser> =>
  chromium.launch({
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"]
  })
