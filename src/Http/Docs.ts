/**
 * Interactive documentation with no internet access (docs/operations.md#api-documentation): Swagger UI at /docs (HttpApi
 * inlines its bundle, loaded on the first visit), ReDoc at /redoc (the standalone bundle from the installed `redoc` package,
 * inlined with the spec, read when the page is first asked for). The
 * OpenAPI document at /openapi.json is served by `HttpApiBuilder.layer` (App.ts).
 */
import { Effect, Layer } from "effect"
import { HttpRouter, HttpServerResponse } from "effect/http"
import { HttpApiSwagger, OpenApi } from "effect/http-api"
import { readFile } from "node:fs/promises"
import { createRequire } from "node:module"
import { Api } from "../Api.ts"

const require = createRequire(import.meta.url)

const escapeScript = (text: string) => text.replace(/</g, "\\u003c")

const redocPage = (js: string, spec: string) =>
  HttpServerResponse.html(`<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>Author Directory Service — API reference</title>
<style>body{margin:0;padding:0}</style></head>
<body><div id="redoc"></div>
<script>${js.replace(/<\/script/gi, "<\\/script")}</script>
<script>Redoc.init(${escapeScript(spec)}, { hideDownloadButton: false }, document.getElementById("redoc"))</script>
</body></html>`)

const layerRedoc = HttpRouter.use((router) =>
  Effect.gen(function*() {
    const page = yield* Effect.cached(
      Effect.map(
        Effect.promise(() => readFile(require.resolve("redoc/bundles/redoc.standalone.js"), "utf8")),
        (js) => redocPage(js, JSON.stringify(OpenApi.fromApi(Api)))
      )
    )
    yield* router.add("GET", "/redoc", page)
  })
)

/**
 * Effect's Swagger UI layer loads its ~2 MB bundle when it is built: built on the first visit to
 * /docs instead of at startup, it costs an idle service nothing (about 7 MB of RSS). Its answer is
 * one fixed page, kept after that first visit.
 */
const layerSwagger = HttpRouter.use((router) =>
  Effect.gen(function*() {
    const page = yield* Effect.cached(
      Effect.scoped(Effect.flatten(HttpRouter.toHttpEffect(HttpApiSwagger.layer(Api, { path: "/docs" }))))
    )
    yield* router.add("GET", "/docs", page)
  })
)

export const layer = Layer.mergeAll(layerSwagger, layerRedoc)
