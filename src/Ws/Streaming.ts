/**
 * Package 1's answer (the whole list, unpaginated: docs/websocket.md#messages) without holding the list: the
 * `Authors` service reads it in keyset batches of 1,000 (as for `GET /authors`) and the answer is
 * written as ONE WebSocket message in fragments, each only once the connection's socket has room
 * (Connection.ts `FragmentedMessage`), so memory does not grow with the table. The client's
 * `ws.onmessage` sees the same single message — the same JSON text, the same protobuf bytes — as
 * when the list was built in memory.
 *
 * JSON: the envelope is written around the batches: `{"pkg_id":1,…,"data":[` batch `,` batch …
 * `],"meta":null}`. Each fragment is one batch.
 *
 * Protobuf: `data_json` is a length-delimited field and comes before nothing but its own length,
 * which must be known before its first byte (and a second `data_json` would replace the first, not
 * extend it). A second read of the table to measure it would not give the same rows when authors
 * change in between (a corrupt or aborted answer), and one snapshot transaction held while a slow
 * client reads would pin a pooled connection (PGlite's only session). So the JSON of the list is
 * written to an unlinked temporary file at database speed (one read, as for JSON), measured, and
 * sent from there in 64 KiB fragments: memory stays at one batch and one read buffer; the disk
 * holds the answer while it is sent and is freed when the file is closed (also if the process dies).
 * At most SPOOLS_MAX answers are spooled at once in the process (the others wait their turn), so
 * the disk holds at most that many copies of the table however many clients ask.
 *
 * A list of one batch is sent as one plain frame. A batch is written only once the
 * next one has arrived, so a database failure on the second batch is still answered with
 * `status_code 1` (`Database error occurred`); a failure after a fragment went out closes the
 * connection 1011 `Internal error` — the client never sees a half message (it discards the
 * fragments of a message cut by a close).
 */
import { Cause, Effect, Exit, Semaphore, Stream } from "effect"
import { type FileHandle, open, unlink } from "node:fs/promises"
import { randomUUID } from "node:crypto"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { reportDatabaseFailure } from "../Db/Failures.ts"
import { authorRowsJson, type AuthorRow } from "../Domain/Author.ts"
import { WsStatus } from "../Errors.ts"
import type { Connection, FragmentedMessage } from "./Connection.ts"
import { encodeResponse, encodeResponseHead } from "./Protobuf.ts"
import { Close } from "./Protocol.ts"

/** Package 1's `data` before it is sent: the first batch, and the others as the stream is pulled. */
export class StreamedList {
  readonly first: ReadonlyArray<AuthorRow>
  /** A full first batch: `rest` may have rows (Authors.listBatches). */
  readonly more: boolean
  readonly rest: Stream.Stream<ReadonlyArray<AuthorRow>>
  constructor(first: ReadonlyArray<AuthorRow>, more: boolean, rest: Stream.Stream<ReadonlyArray<AuthorRow>>) {
    this.first = first
    this.more = more
    this.rest = rest
  }
}

/** How the answer went: all sent, answered with an error instead (nothing was sent yet), or cut (1011). */
export type StreamOutcome = "sent" | "failed" | "aborted"

/** Bytes read from the spool file per protobuf fragment. */
const SPOOL_CHUNK = 64 * 1024

const ready = (message: FragmentedMessage) => Effect.promise(() => message.ready())

/** The message being written, for the failure handler: has the client got part of it? */
interface Progress {
  message: FragmentedMessage | undefined
}

/**
 * Walks the list one batch behind: `onBatch` gets each batch's JSON (with its leading comma) once
 * the next batch exists, and may say stop (false: the connection went away); `onLast` gets the
 * final batch's JSON, and whether it was the only one.
 */
const eachBatch = <E>(
  list: StreamedList,
  onBatch: (json: string) => Effect.Effect<boolean, E>,
  onLast: (json: string, single: boolean) => Effect.Effect<void, E>
) =>
  Effect.gen(function*() {
    // A batch in `rest` means a full first one: every later batch's JSON follows a comma.
    let pending = authorRowsJson(list.first)
    let single = true
    let stopped = false
    yield* Stream.runForEachWhile(list.rest, (rows) =>
      Effect.gen(function*() {
        single = false
        if (!(yield* onBatch(pending))) {
          stopped = true
          return false
        }
        pending = `,${authorRowsJson(rows)}`
        return true
      }))
    if (!stopped) yield* onLast(pending, single)
  })

/** JSON: the envelope around the batches, one fragment per batch. */
const sendJson = (conn: Connection, pkgId: number, reqId: string, list: StreamedList, progress: Progress) => {
  const prefix = `{"pkg_id":${pkgId},"req_id":${JSON.stringify(reqId)},"status_code":${WsStatus.OK},"data":[`
  const suffix = `],"meta":null}`
  return eachBatch(
    list,
    (json) =>
      Effect.gen(function*() {
        const first = progress.message === undefined
        const message = progress.message ??= conn.beginMessage()
        if (!(yield* ready(message))) return false
        message.write(first ? prefix + json : json, false)
        return true
      }),
    (json, single) =>
      Effect.gen(function*() {
        const message = progress.message
        if (single || message === undefined) return conn.send(prefix + json + suffix)
        if (yield* ready(message)) message.write(json + suffix, true)
      })
  )
}

/** Protobuf answers being spooled at once in this process (a bound on the temporary files' bytes). */
export const SPOOLS_MAX = 4
const spools = Semaphore.makeUnsafe(SPOOLS_MAX)

/** Protobuf: the list's JSON spooled to an unlinked file, then one Response in fragments. */
const sendProtobuf = (conn: Connection, pkgId: number, reqId: string, list: StreamedList, progress: Progress) => {
  const encoder = new TextEncoder()
  const spooled: { file: FileHandle | undefined; length: number } = { file: undefined, length: 0 }
  const spool = (text: string) =>
    Effect.promise(async () => {
      const bytes = encoder.encode(text)
      if (spooled.file === undefined) {
        const path = join(tmpdir(), `ads-ws-${randomUUID()}.json`)
        spooled.file = await open(path, "wx+", 0o600)
        await unlink(path) // the space is freed when the file is closed, whatever happens
      }
      await spooled.file.write(bytes, 0, bytes.length, spooled.length)
      spooled.length += bytes.length
      return true
    })
  const send = Effect.gen(function*() {
    let last: { readonly json: string; readonly single: boolean } | undefined
    yield* eachBatch(
      list,
      (json) => spool(spooled.length === 0 ? `[${json}` : json),
      (json, single) => Effect.sync(() => void (last = { json, single }))
    )
    if (last === undefined) return // the connection went away
    if (last.single) {
      return conn.send(encodeResponse({ pkg_id: pkgId, req_id: reqId, status_code: WsStatus.OK, data: list.first, meta: null }))
    }
    yield* spool(`${last.json}]`)
    const file = spooled.file!
    const length = spooled.length
    const message = progress.message = conn.beginMessage()
    const buffer = new Uint8Array(SPOOL_CHUNK)
    let head: Uint8Array | undefined = encodeResponseHead(pkgId, reqId, WsStatus.OK, length)
    for (let offset = 0; offset < length;) {
      if (!(yield* ready(message))) return
      const { bytesRead } = yield* Effect.promise(() => file.read(buffer, 0, Math.min(SPOOL_CHUNK, length - offset), offset))
      if (bytesRead === 0) return yield* Effect.die(new Error("the spooled answer ended early"))
      offset += bytesRead
      const chunk = buffer.subarray(0, bytesRead)
      // `ws` may still hold a fragment it was handed: each gets its own bytes (the buffer is reused).
      message.write(head === undefined ? chunk.slice() : concat(head, chunk), offset >= length)
      head = undefined
    }
  })
  const closed = send.pipe(Effect.ensuring(Effect.promise(async () => await spooled.file?.close())))
  return list.more ? spools.withPermit(closed) : closed
}

const concat = (a: Uint8Array, b: Uint8Array) => {
  const out = new Uint8Array(a.length + b.length)
  out.set(a, 0)
  out.set(b, a.length)
  return out
}

/**
 * Sends package 1's answer (status_code 0) as one message. A failure before any fragment went out
 * is returned as "failed" (the caller answers with the error); after, the connection is closed
 * 1011 and the outcome is "aborted".
 */
export const sendStreamedList = (
  conn: Connection,
  pkgId: number,
  reqId: string,
  list: StreamedList
): Effect.Effect<StreamOutcome> =>
  Effect.gen(function*() {
    const progress: Progress = { message: undefined }
    const exit = yield* Effect.exit(
      conn.format === "json" ? sendJson(conn, pkgId, reqId, list, progress) : sendProtobuf(conn, pkgId, reqId, list, progress)
    )
    if (Exit.isSuccess(exit)) return "sent"
    // docs/operations.md#outages: the database failing is an outage to report once, not a bug per answer.
    yield* reportDatabaseFailure(Cause.squash(exit.cause), "WebSocket list answer", Effect.logError("WebSocket list answer failed", exit.cause))
    if (progress.message?.started() !== true) {
      progress.message?.cancel()
      return "failed"
    }
    conn.close(Close.InternalError)
    return "aborted"
  })
