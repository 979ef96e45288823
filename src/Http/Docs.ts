/**
 * Interactive documentation with no internet access (CONTRACT §7): Swagger UI at /docs (HttpApi
 * inlines its bundle), ReDoc at /redoc (the standalone bundle from the installed `redoc` package,
 * inlined with the spec), and the OpenAPI document at /openapi.json.
 */
import { HttpApiBuilder, HttpApiSwagger, HttpServerResponse, OpenApi } from "@effect/platform"
import { Effect, Layer } from "effect"
import { readFile } from "node:fs/promises"
import { createRequire } from "node:module"
import { Api } from "../Api.ts"

const require = createRequire(import.meta.url)

const escapeScript = (text: string) => text.replace(/</g, "\\u003c")

const RedocLive = HttpApiBuilder.Router.use((router) =>
  Effect.gen(function*() {
    const bundle = yield* Effect.cached(Effect.promise(() => readFile(require.resolve("redoc/bundles/redoc.standalone.js"), "utf8")))
    const spec = JSON.stringify(OpenApi.fromApi(Api))
    yield* router.get(
      "/redoc",
      Effect.map(bundle, (js) =>
        HttpServerResponse.html(`<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>Author Directory Service — API reference</title>
<style>body{margin:0;padding:0}</style></head>
<body><div id="redoc"></div>
<script>${js.replace(/<\/script/gi, "<\\/script")}</script>
<script>Redoc.init(${escapeScript(spec)}, { hideDownloadButton: false }, document.getElementById("redoc"))</script>
</body></html>`))
    )
  })
)

export const DocsLive = Layer.mergeAll(
  HttpApiSwagger.layer({ path: "/docs" }),
  HttpApiBuilder.middlewareOpenApi({ path: "/openapi.json" }),
  RedocLive
)
