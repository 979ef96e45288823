/**
 * The WebSocket's HTTP companions (docs/websocket.md, docs/http-api.md#endpoints): `/proto/websocket.proto`, the
 * schema of `?format=protobuf`; `/asyncapi.json`, the protocol generated from the schemas and the
 * package table the server runs; and `GET /web` without an upgrade, which answers 426. Public, not
 * rate limited, not in OpenAPI.
 */
import { Effect } from "effect"
import { HttpRouter, HttpServerResponse } from "effect/http"
import { makeAsyncApi } from "./AsyncApi.ts"
import { appVersion } from "../Observability/Metrics.ts"
import { Packages } from "./Packages.ts"
import { PROTO_TEXT } from "./Protobuf.ts"
import {
  AuthFrame,
  AuthOk,
  BroadcastEvents,
  BroadcastFrame,
  Close,
  RequestEnvelope,
  ResponseEnvelope,
  StatusCodes,
  WS_PATH
} from "./Protocol.ts"

export const PROTO_PATH = "/proto/websocket.proto"

export const asyncApiDocument = () =>
  makeAsyncApi({
    title: "Author Directory Service WebSocket",
    version: appVersion,
    requestEnvelope: RequestEnvelope,
    responseEnvelope: ResponseEnvelope,
    broadcast: BroadcastFrame,
    authFrame: AuthFrame,
    authOk: AuthOk,
    packages: [...Packages.values()],
    statusCodes: StatusCodes,
    closeCodes: Object.values(Close),
    broadcastEvents: BroadcastEvents,
    protobufUrl: PROTO_PATH
  })

/** The three routes, on the app's `HttpRouter`; the AsyncAPI document is built once, here. */
export const layer = HttpRouter.use((router) =>
  Effect.gen(function*() {
    const asyncApi = JSON.stringify(asyncApiDocument())
    yield* router.add("GET", PROTO_PATH, HttpServerResponse.text(PROTO_TEXT, { contentType: "text/plain; charset=utf-8" }))
    yield* router.add("GET", "/asyncapi.json", HttpServerResponse.text(asyncApi, { contentType: "application/json" }))
    yield* router.add(
      "GET",
      WS_PATH,
      HttpServerResponse.jsonUnsafe({ detail: "WebSocket upgrade required" }, { status: 426, headers: { upgrade: "websocket" } })
    )
  })
)
