/**
 * WebSocket package 1 (the whole list, unpaginated) is read in keyset batches and sent as ONE
 * message in fragments (Ws/Streaming.ts): the client gets the same JSON text and the same protobuf
 * bytes as when the list was built in memory, and the frames show the fragmentation. On a bare
 * `ws` pair: frames queued meanwhile (broadcasts) wait for the message's last fragment, and the
 * writer waits for the socket to drain. Over an Authors service whose batches fail: a database
 * failure part-way never leaves a half message.
 */
import { Context, Effect, Exit, Layer, References, Scope, Stream } from "effect"
import { randomUUID } from "node:crypto"
import { readdirSync, readlinkSync } from "node:fs"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { generateKeyPair, SignJWT } from "jose"
import pg from "pg"
import WebSocket, { WebSocketServer } from "ws"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { AuditLog } from "../../src/AuditLogs/AuditLog.ts"
import { makeTokenVerifier, TokenVerifier } from "../../src/Auth/TokenVerifier.ts"
import { Authors } from "../../src/Authors/Authors.ts"
import { ReadCache } from "../../src/Authors/ReadCache.ts"
import { AppConfig } from "../../src/Config.ts"
import type { AuthorRow } from "../../src/Domain/Author.ts"
import { Upgrades, type UpgradeHandler } from "../../src/Edge/Upgrades.ts"
import { RateLimiter } from "../../src/RateLimit/RateLimiter.ts"
import { makeConnection } from "../../src/Ws/Connection.ts"
import { encodeResponse, PROTO_TEXT } from "../../src/Ws/Protobuf.ts"
import { ConnectionRegistry } from "../../src/Ws/Registry.ts"
import { SPOOLS_MAX } from "../../src/Ws/Streaming.ts"
import { PackageHandlers } from "../../src/Ws/Packages.ts"
import * as WsServer from "../../src/Ws/Server.ts"
import { closeCode, Opcode, type RawMessage, rawWs, type RawWsClient } from "../support/RawWs.ts"
import { request, signToken, startTestApp, TEST_DATABASE_URL, type TestApp } from "../support/TestApp.ts"
import { connectWs, protoCodec, type ProtoCodec } from "../support/WsClient.ts"

/** Three keyset batches of 1,000 (the last one partial). */
const AUTHORS = 2_500

/** Names that JSON and UTF-8 treat differently from ASCII: quotes, backslashes, astral and CJK characters. */
const nameOf = (i: number) => `Streamed ${String(i).padStart(5, "0")} "q" \\ 😀 名 ${randomUUID().slice(0, 4)}`

const packageOne = (reqId: string, data: unknown = {}) => JSON.stringify({ pkg_id: 1, req_id: reqId, data })

describe("package 1 on a table of a few thousand authors", () => {
  let app: TestApp
  let token: string
  let codec: ProtoCodec
  /** What `GET /authors` answers (itself streamed, byte for byte the `Author` schema's encoding). */
  let expected: Array<AuthorRow>
  const raws: Array<RawWsClient> = []

  const raw = (query: string) => {
    const client = rawWs(`${app.wsUrl}/web?${query}`)
    raws.push(client)
    return client
  }

  beforeAll(async () => {
    app = await startTestApp({
      database: TEST_DATABASE_URL !== undefined ? "postgres" : "embedded",
      // One user, many sockets (the tests leave theirs open; one opens SPOOLS_MAX + 3 at once).
      config: { rateLimitEnabled: false, wsMessageRateLimit: 1_000_000, wsMaxConnectionsPerUser: 100 }
    })
    token = await signToken(app, { sub: "streamer", roles: ["get-authors", "create-author"] })
    codec = protoCodec(await (await fetch(`${app.url}/proto/websocket.proto`)).text())
    if (app.databaseUrl !== undefined) {
      const client = new pg.Client({ connectionString: app.databaseUrl })
      await client.connect()
      await client.query("INSERT INTO authors (name) SELECT unnest($1::text[])", [Array.from({ length: AUTHORS }, (_, i) => nameOf(i))])
      await client.end()
    } else {
      // The embedded database has no address of its own: package 3, pipelined on one connection.
      const seeder = connectWs(app.url, { token })
      expect((await seeder.request(1, { filters: { id: -1 } })).status_code).toBe(0) // open: the requests below go straight out
      const created = await Promise.all(Array.from({ length: AUTHORS }, (_, i) => seeder.request(3, { name: nameOf(i) })))
      expect(created.every((r) => r.status_code === 0)).toBe(true)
      await seeder.close()
    }
    const list = await request(app, "GET", "/authors", { token })
    expect(list.status).toBe(200)
    expected = list.body as Array<AuthorRow>
    expect(expected).toHaveLength(AUTHORS)
  })
  afterAll(async () => {
    for (const r of raws) r.destroy()
    await app.close()
  })

  it("JSON: one text message in several fragments, the very text of the envelope with the whole list", async () => {
    const client = raw(`token=${token}`)
    expect((await client.upgraded).status).toBe(101)
    const reqId = randomUUID()
    client.sendText(packageOne(reqId))
    const message = await client.nextMessage()
    expect(message.opcode).toBe(Opcode.Text)
    expect(message.frames).toBeGreaterThan(1)
    expect(message.payload.toString("utf8")).toBe(JSON.stringify({ pkg_id: 1, req_id: reqId, status_code: 0, data: expected, meta: null }))
  })

  it("JSON through a `ws` client: exactly one message with every author, and the connection goes on", async () => {
    const client = connectWs(app.url, { token })
    const answer = await client.request(1, {})
    expect(answer).toEqual({ pkg_id: 1, req_id: answer.req_id, status_code: 0, data: expected, meta: null })
    expect(client.responses.size).toBe(0)
    expect(client.others.size).toBe(0)
    expect((await client.request(2, { page: 1, per_page: 1 })).data).toEqual([expected[0]])
    await client.close()
  })

  it("protobuf: one binary message in several fragments, byte for byte the Response built in memory", async () => {
    const client = raw(`token=${token}&format=protobuf`)
    expect((await client.upgraded).status).toBe(101)
    const reqId = randomUUID()
    client.sendBinary(codec.encodeRequest(1, reqId, {}))
    const message = await client.nextMessage()
    expect(message.opcode).toBe(Opcode.Binary)
    expect(message.frames).toBeGreaterThan(1)
    const inMemory = encodeResponse({ pkg_id: 1, req_id: reqId, status_code: 0, data: expected, meta: null })
    expect(Buffer.compare(message.payload, Buffer.from(inMemory))).toBe(0)
    expect(codec.decodeResponse(message.payload)).toEqual({ pkg_id: 1, req_id: reqId, status_code: 0, data: expected, meta: null })
  })

  it(`protobuf: ${SPOOLS_MAX + 3} clients at once each get the whole list; never more than ${SPOOLS_MAX} answers spooled on disk at a time`, async () => {
    /** This process's open spool files (unlinked at once, so only the descriptors show them). */
    const openSpools = () =>
      readdirSync("/proc/self/fd").filter((fd) => {
        try {
          return /ads-ws-.*\(deleted\)$/.test(readlinkSync(`/proc/self/fd/${fd}`))
        } catch {
          return false // closed between the listing and the look
        }
      }).length
    let most = 0
    const sampler = setInterval(() => (most = Math.max(most, openSpools())), 2)
    try {
      const clients = Array.from({ length: SPOOLS_MAX + 3 }, () => raw(`token=${token}&format=protobuf`))
      await Promise.all(clients.map((c) => c.upgraded))
      const reqIds = clients.map(() => randomUUID())
      clients.forEach((c, i) => c.sendBinary(codec.encodeRequest(1, reqIds[i]!, {})))
      const messages = await Promise.all(clients.map((c) => c.nextMessage()))
      messages.forEach((m, i) => {
        expect(codec.decodeResponse(m.payload)).toEqual({ pkg_id: 1, req_id: reqIds[i], status_code: 0, data: expected, meta: null })
      })
    } finally {
      clearInterval(sampler)
    }
    expect(most).toBeLessThanOrEqual(SPOOLS_MAX)
  })

  it("a list of one batch is one plain frame, in both formats", async () => {
    const filter = { filters: { search_term: expected[7]!.name } }
    const json = raw(`token=${token}`)
    const reqId = randomUUID()
    json.sendText(packageOne(reqId, filter))
    const text: RawMessage = await json.nextMessage()
    expect(text.frames).toBe(1)
    expect(text.payload.toString("utf8")).toBe(JSON.stringify({ pkg_id: 1, req_id: reqId, status_code: 0, data: [expected[7]], meta: null }))
    const binary = raw(`token=${token}&format=protobuf`)
    binary.sendBinary(codec.encodeRequest(1, reqId, filter))
    const bytes = await binary.nextMessage()
    expect(bytes.frames).toBe(1)
    expect(Buffer.compare(bytes.payload, Buffer.from(encodeResponse({ pkg_id: 1, req_id: reqId, status_code: 0, data: [expected[7]], meta: null })))).toBe(0)
  })
})

// ---------------------------------------------------------------------------------------------
// The writer on a bare `ws` pair: queued frames wait for the fragmented message; backpressure.

describe("a connection's fragmented message", () => {
  let wss: WebSocketServer
  let url: string
  beforeAll(async () => {
    wss = new WebSocketServer({ port: 0, host: "127.0.0.1", perMessageDeflate: false })
    await new Promise<void>((resolve) => wss.once("listening", () => resolve()))
    url = `ws://127.0.0.1:${(wss.address() as AddressInfo).port}`
  })
  afterAll(() => new Promise<void>((resolve) => wss.close(() => resolve())))

  /** A server-side Connection and the client socket facing it. */
  const pair = async () => {
    const accepted = new Promise<WebSocket>((resolve) => wss.once("connection", resolve))
    const client = new WebSocket(url, { perMessageDeflate: false })
    const messages: Array<{ readonly data: Buffer; readonly binary: boolean }> = []
    const waiters: Array<() => void> = []
    client.on("message", (data: Buffer, binary) => {
      messages.push({ data, binary })
      waiters.splice(0).forEach((w) => w())
    })
    const received = (n: number) => new Promise<void>((resolve) => {
      const check = () => (messages.length >= n ? resolve() : waiters.push(check))
      check()
    })
    const server = await accepted
    await new Promise<void>((resolve) => (client.readyState === WebSocket.OPEN ? resolve() : client.once("open", () => resolve())))
    const conn = makeConnection(server, { id: randomUUID(), format: "json", correlationId: "c", traceId: "0".repeat(32), ip: "127.0.0.1", userAgent: "" }, () => {})
    return { conn, server, client, messages, received }
  }

  it("frames queued behind it wait for its last fragment; frames queued before it go first", async () => {
    const { client, conn, messages, received } = await pair()
    conn.send("before")
    const message = conn.beginMessage()
    conn.send("behind")
    expect(await message.ready()).toBe(true)
    message.write("[1,", false)
    conn.send("behind, later")
    expect(await message.ready()).toBe(true)
    message.write("2,", false)
    expect(await message.ready()).toBe(true)
    message.write("3]", true)
    await received(4)
    expect(messages.map((m) => m.data.toString())).toEqual(["before", "[1,2,3]", "behind", "behind, later"])
    client.terminate()
  })

  it("waits while the client does not read: never more than the high-water mark handed to the socket", async () => {
    const { client, conn, messages, received, server } = await pair()
    const clientSocket = (client as unknown as { _socket: { pause(): void; resume(): void } })._socket
    clientSocket.pause()
    const message = conn.beginMessage()
    const chunk = "x".repeat(64 * 1024)
    const fragments = 400 // 25 MiB: more than the socket buffers of both ends hold
    let waited = false
    let mostBuffered = 0
    for (let i = 0; i < fragments; i++) {
      const ready = message.ready()
      let settled = false
      void ready.then(() => (settled = true))
      await Promise.resolve()
      if (!settled && !waited) {
        // The writer is waiting for the socket to drain: let the client read from now on.
        waited = true
        clientSocket.resume()
      }
      expect(await ready).toBe(true)
      mostBuffered = Math.max(mostBuffered, server.bufferedAmount)
      message.write(chunk, i === fragments - 1)
    }
    expect(waited).toBe(true)
    expect(mostBuffered).toBeLessThanOrEqual(256 * 1024)
    await received(1)
    expect(messages[0]!.data.length).toBe(fragments * chunk.length)
    client.terminate()
  })

  it("cancelled before its first fragment, the frames behind it go on", async () => {
    const { client, conn, messages, received } = await pair()
    const message = conn.beginMessage()
    conn.send("behind")
    message.cancel()
    await received(1)
    expect(messages.map((m) => m.data.toString())).toEqual(["behind"])
    expect(await message.ready()).toBe(false)
    client.terminate()
  })
})

// ---------------------------------------------------------------------------------------------
// A database failure part-way: the `/web` server over an Authors service whose batches fail.

const row = (id: number): AuthorRow => ({ id, name: `Author ${id}`, created_at: "2026-01-01T00:00:00.000000" })
const batch = (from: number) => Array.from({ length: 1000 }, (_, i) => row(from + i))

describe("a database failure while the list is read", () => {
  let server: Server
  let scope: Scope.Closeable
  let base: string
  let token: string
  /** How many batches after the first are read before the next one fails. */
  let goodBatches = 0

  beforeAll(async () => {
    const { privateKey, publicKey } = await generateKeyPair("ES256")
    token = await new SignJWT({ typ: "Bearer", roles: ["get-authors"] })
      .setProtectedHeader({ alg: "ES256" })
      .setIssuer("stream-test")
      .setSubject("stream-user")
      .setIssuedAt()
      .setExpirationTime("10m")
      .sign(privateKey)
    server = createServer((_req, res) => res.writeHead(404).end())
    let handler: UpgradeHandler | undefined
    server.on("upgrade", (req, socket, head) => handler?.upgrade(req, socket, head))
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    base = `ws://127.0.0.1:${(server.address() as AddressInfo).port}`
    const failing = Stream.suspend(() =>
      Stream.concat(
        Stream.fromIterable(Array.from({ length: goodBatches }, (_, i) => batch(1001 + i * 1000))),
        Stream.die(new Error("connection to the database lost"))
      )
    )
    const unused = Effect.die("not used here")
    const FailingAuthors = Layer.succeed(Authors, Authors.of({
      listBatches: () => Effect.succeed({ first: batch(1), more: true, rest: failing }),
      paginate: () => unused,
      readList: () => Effect.succeed({ first: batch(1), rest: failing }),
      readPage: () => unused,
      readAuthor: () => unused,

      create: () => unused,
      update: () => unused,
      remove: () => unused
    }))
    const UpgradesHere = Layer.succeed(Upgrades, Upgrades.of({
      handle: (h) => Effect.acquireRelease(Effect.sync(() => void (handler = h)), () => Effect.sync(() => void (handler = undefined)))
    }))
    const layer = WsServer.layer.pipe(
      Layer.provide(PackageHandlers.layer),
      Layer.provide([
        UpgradesHere,
        FailingAuthors,
        ReadCache.layerNone,
        AuditLog.layerNone,
        RateLimiter.layerMemory,
        ConnectionRegistry.layerMemory,
        Layer.succeed(TokenVerifier, makeTokenVerifier({ key: publicKey, issuer: "stream-test", audience: undefined, clientId: "x" }))
      ]),
      Layer.provide(AppConfig.layerTest({ rateLimitEnabled: false })),
      Layer.provide(Layer.succeed(References.MinimumLogLevel, "None"))
    )
    scope = Effect.runSync(Scope.make())
    await Effect.runPromise(Layer.buildWithScope(layer, scope).pipe(Effect.map(Context.empty)))
  })
  afterAll(async () => {
    await Effect.runPromise(Scope.close(scope, Exit.void))
    await new Promise<void>((resolve) => server.close(() => resolve()))
  })

  it("JSON, after fragments went out: the connection closes 1011 and the client never gets a message", async () => {
    goodBatches = 1 // batch 1 is sent when batch 2 arrives; batch 3 fails
    const client = rawWs(`${base}/web?token=${token}`)
    expect((await client.upgraded).status).toBe(101)
    client.sendText(packageOne(randomUUID()))
    const first = await client.frames.take()
    expect(first).toMatchObject({ fin: false, opcode: Opcode.Text })
    const close = await client.frames.take()
    expect(close.opcode).toBe(Opcode.Close)
    expect(closeCode(close)).toBe(1011)
    expect(close.payload.subarray(2).toString("utf8")).toBe("Internal error")
    // Through a `ws` client: no message event at all, just the close.
    const ws = connectWs(base, { token })
    ws.send(packageOne(randomUUID()))
    expect(await ws.closed).toEqual({ code: 1011, reason: "Internal error" })
    expect(ws.responses.size + ws.others.size).toBe(0)
    client.destroy()
  })

  it("JSON, before any fragment: answered status_code 1 Database error occurred, the connection stays open", async () => {
    goodBatches = 0 // the second batch fails: nothing was sent yet
    const ws = connectWs(base, { token })
    const answer = await ws.request(1, {})
    expect(answer).toMatchObject({ status_code: 1, data: { msg: "Database error occurred" }, meta: null })
    expect((await ws.request(1, {})).status_code).toBe(1)
    await ws.close()
  })

  it("protobuf: the list is read before the first byte goes out, so a failure is answered status_code 1", async () => {
    goodBatches = 1
    const codec = protoCodec(PROTO_TEXT)
    const ws = connectWs(base, { token, proto: codec })
    expect(await ws.request(1, {})).toMatchObject({ status_code: 1, data: { msg: "Database error occurred" } })
    await ws.close()
  })

  it("package 2 whose query dies: answered status_code 1 Database error occurred, the connection stays open", async () => {
    const ws = connectWs(base, { token })
    expect(await ws.request(2, { page: 1, per_page: 1 })).toMatchObject({ pkg_id: 2, status_code: 1, data: { msg: "Database error occurred" }, meta: null })
    expect((await ws.request(2, { page: 1, per_page: 1 })).status_code).toBe(1)
    await ws.close()
  })
})
