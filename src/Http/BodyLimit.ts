/**
 * Front door stage 1 (docs/errors-and-limits.md#check-order): a body over `MAX_REQUEST_BODY_BYTES` is a 413
 * before anything else — before authentication and the rate limit — whatever the method (a GET
 * or HEAD may carry a body too), including a chunked body, whose size is only known once it is read.
 */
import { Effect, Option } from "effect"
import { HttpMethod, HttpServerRequest } from "effect/http"
import type { IncomingMessage } from "node:http"
import { toIncomingMessage } from "@effect/platform-node/NodeHttpServerRequest"

/** The whole body, or `None` once it passes `maxBytes` (the rest is left unread). */
const readBounded = (source: IncomingMessage, maxBytes: number) =>
  Effect.callback<Option.Option<Buffer>>((resume) => {
    const chunks: Array<Buffer> = []
    let bytes = 0
    const done = (result: Option.Option<Buffer>) => {
      source.off("data", onData).off("end", onEnd).off("error", onError)
      resume(Effect.succeed(result))
    }
    const onData = (chunk: Buffer) => {
      bytes += chunk.length
      if (bytes > maxBytes) {
        source.pause()
        done(Option.none())
      } else chunks.push(chunk)
    }
    const onEnd = () => done(Option.some(Buffer.concat(chunks)))
    const onError = () => done(Option.none()) // the upload broke off: closed like an oversize one
    source.on("data", onData).on("end", onEnd).on("error", onError)
  })

/**
 * `None` when the body is over the limit, else the request to go on with. A Content-Length is
 * judged as declared, before a byte of the body arrives: the body is exactly those bytes (what
 * follows them is the next request), and a client that declares more than the limit gets its 413
 * without the server waiting for bytes it may never send. A body without Content-Length (chunked)
 * is read here, under the limit, straight from the socket: the platform's own bounded read would
 * destroy the request — and with it the connection — when the limit is passed, so no 413 could
 * be answered. Under the limit the app gets the same request with the body already read; a method
 * without a body in the app's sense (GET, HEAD, OPTIONS, TRACE) keeps its request, the body read
 * and dropped, since nothing after this reads one.
 */
export const makeBodyLimit = (maxBytes: number) =>
(request: HttpServerRequest.HttpServerRequest): Effect.Effect<Option.Option<HttpServerRequest.HttpServerRequest>> => {
  const length = request.headers["content-length"]
  if (length !== undefined) return Effect.succeed(Number(length) > maxBytes ? Option.none() : Option.some(request))
  if (request.headers["transfer-encoding"] === undefined) return Effect.succeed(Option.some(request))
  const source = toIncomingMessage(request) as IncomingMessage
  return readBounded(source, maxBytes).pipe(
    Effect.map(Option.map((body) => {
      if (!HttpMethod.hasBody(request.method)) return request
      const { "transfer-encoding": _, ...headers } = request.headers
      return HttpServerRequest.fromWeb(
        new Request(`http://localhost${request.url}`, { method: request.method, headers, body: new Uint8Array(body) })
      ).modify({ remoteAddress: request.remoteAddress })
    }))
  )
}
