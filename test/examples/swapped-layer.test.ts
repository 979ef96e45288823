/**
 * The example of docs/architecture.md#testing-with-a-swapped-layer, run by the suite so it stays true: the real
 * `Authors` service on the embedded database, with its `AuthorEvents` dependency replaced by one
 * that records what would have been broadcast.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Schedule } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as App from "../../src/App.ts"
import { AuthorEvents, Authors } from "../../src/Authors/Authors.ts"
import { ReadCache } from "../../src/Authors/ReadCache.ts"
import { AuthorRepo } from "../../src/Authors/Repo.ts"
import { AppConfig } from "../../src/Config.ts"
import type { AuthorEvent } from "../../src/Domain/Author.ts"
import { seedEmbeddedDatabase } from "../support/TestApp.ts"

describe("Authors with a recording AuthorEvents", () => {
  it.live("announces every change it makes", () => {
    const dataDir = mkdtempSync(join(tmpdir(), "ads-example-"))
    seedEmbeddedDatabase(dataDir) // a migrated copy of the embedded database, to start fast
    const published: Array<AuthorEvent> = []
    const RecordingEvents = Layer.succeed(AuthorEvents, AuthorEvents.of({
      publish: (event) => Effect.sync(() => void published.push(event))
    }))
    const TestLayer = Authors.layer.pipe(
      Layer.provide(RecordingEvents),
      Layer.provide(ReadCache.layerMemory),
      Layer.provide(AuthorRepo.layer),
      Layer.provide(App.layerDatabase),
      Layer.provide(AppConfig.layerTest({ dataDir }))
    )
    return Effect.gen(function*() {
      const authors = yield* Authors
      const created = yield* authors.create("Ursula K. Le Guin")
      yield* authors.update(created.id, "Ursula Le Guin")
      // Announcements are forked: wait until both arrived.
      yield* Effect.repeat(Effect.sync(() => published.length), { until: (n) => n >= 2, schedule: Schedule.spaced("5 millis") })
      expect(published.map((e) => [e.event, e.author.name])).toEqual([
        ["author.created", "Ursula K. Le Guin"],
        ["author.updated", "Ursula Le Guin"]
      ])
    }).pipe(
      Effect.provide(TestLayer),
      Effect.ensuring(Effect.sync(() => rmSync(dataDir, { recursive: true, force: true })))
    )
  })
})
