/**
 * The `/web` protocol row by row (docs/websocket.md) with real `ws` clients over a real server, on
 * the in-process stores and (when TEST_REDIS_URL is set) on Redis.
 */
import { Option } from "effect"
import { randomUUID } from "node:crypto"
import WebSocket from "ws"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { AppConfigShape } from "../../src/Config.ts"
import { awaitAuditDetail } from "../support/AuditTrail.ts"
import { eventually } from "../support/Eventually.ts"
import { scrapeMetrics } from "../support/Metrics.ts"
import { request, signToken, startTestApp, TEST_REDIS_URL, type TestApp } from "../support/TestApp.ts"
import { connectWs, type Envelope, protoCodec, type ProtoCodec, type WsClient, ZERO_REQ_ID } from "../support/WsClient.ts"
import { singleRedis } from "../../src/Config/Redis.ts"

const stores = ["memory", ...(TEST_REDIS_URL !== undefined ? ["redis"] as const : [])] as const

const ALL_ROLES = ["admin", "get-authors", "create-author", "update-author", "delete-author"]

const storeConfig = (store: (typeof stores)[number]): Partial<AppConfigShape> =>
  store === "redis"
    ? { redis: Option.some(singleRedis(TEST_REDIS_URL!)), redisKeyPrefix: `ads-ws-test-${randomUUID().slice(0, 8)}:` }
    : {}

describe.each(stores)("WebSocket /web (%s stores)", (store) => {
  let app: TestApp
  let admin: string
  let reader: string
  const clients: Array<WsClient> = []

  /** A token of a fresh user (so per-user limits of one test never touch another). */
  const tokenFor = (roles: ReadonlyArray<string>, options: { readonly sub?: string; readonly expiresIn?: string | number } = {}) => {
    const sub = options.sub ?? `ws-user-${randomUUID()}`
    return signToken(app, { sub, preferred_username: sub, roles }, options.expiresIn !== undefined ? { expiresIn: options.expiresIn } : {})
  }

  const connect = (options: Parameters<typeof connectWs>[1]) => {
    const client = connectWs(app.url, options)
    clients.push(client)
    return client
  }

  const activeConnections = async () =>
    ((await request(app, "GET", "/health")).body as { websocket: { active_connections: number } }).websocket.active_connections

  /**
   * The server counts a connection as gone when its socket ends, which may come just after the
   * client saw the close: wait until /health counts exactly the clients that are still open.
   */
  const settled = async () => {
    const expected = () => clients.filter((c) => c.ws.readyState === WebSocket.OPEN).length
    await eventually(async () => expect(await activeConnections()).toBe(expected()), "/health to count the open clients")
  }

  /** Connected and authenticated: a request was answered. */
  const connected = async (token: string, options: Parameters<typeof connectWs>[1] = {}) => {
    const client = connect({ token, ...options })
    const reply = await client.request(1, { filters: { id: -1 } })
    expect(reply.status_code).toBe(0)
    return client
  }

  beforeAll(async () => {
    app = await startTestApp({
      config: {
        ...storeConfig(store),
        rateLimitEnabled: false,
        wsMaxConnectionsPerUser: 3,
        wsAuthTimeoutSeconds: 1,
        wsSessionGraceSeconds: 0,
        wsMaxMessageBytes: 4096,
        wsMessageRateLimit: 100_000,
        allowedWsOrigins: ["https://app.example"]
      }
    })
    admin = await tokenFor(ALL_ROLES)
    reader = await tokenFor(["get-authors"])
  })
  afterAll(async () => {
    for (const c of clients) c.ws.terminate()
    await app.close()
  })

  describe("handshake", () => {
    it("accepts the token as Authorization, token or access_token query parameter (bare or Bearer) and as a header", async () => {
      for (const query of [
        { Authorization: `Bearer ${admin}` },
        { token: admin },
        { token: `Bearer ${admin}` },
        { access_token: admin }
      ]) {
        const client = connect({ query })
        expect((await client.request(1, {})).status_code).toBe(0)
        await client.close()
      }
      const viaHeader = connect({ headers: { authorization: `Bearer ${admin}` } })
      expect((await viaHeader.request(1, {})).status_code).toBe(0)
      await viaHeader.close()
    })

    it("echoes X-Correlation-ID on the 101 response, or generates one", async () => {
      const given = connect({ token: admin, headers: { "x-correlation-id": "ws-corr-1" } })
      expect((await given.opened)["x-correlation-id"]).toBe("ws-corr-1")
      const generated = connect({ token: admin, headers: { "x-correlation-id": "bad id!" } })
      expect((await generated.opened)["x-correlation-id"]).toMatch(/^[0-9a-f]{8}$/)
      await Promise.all([given.close(), generated.close()])
    })

    it("closes 4001 Invalid or expired token for a bad, expired, wrong-issuer or non-bearer token", async () => {
      const tokens = [
        "not-a-jwt",
        `${admin.slice(0, -4)}AAAA`,
        await tokenFor(ALL_ROLES, { expiresIn: -10 }),
        await signToken(app, { sub: "x", roles: ALL_ROLES }, { issuer: "https://evil.example" })
      ]
      for (const token of tokens) {
        expect(await connect({ token }).closed).toEqual({ code: 4001, reason: "Invalid or expired token" })
      }
      expect(await connect({ query: { Authorization: `Basic ${admin}` } }).closed).toEqual({ code: 4001, reason: "Invalid or expired token" })
    })

    it("without a query token: auth frame → auth_ok, then packages work", async () => {
      const client = connect({})
      client.send({ type: "auth", token: `Bearer ${admin}` })
      expect(await client.others.take()).toEqual({ type: "auth_ok" })
      expect((await client.request(1, {})).status_code).toBe(0)
      await client.close()
      const bare = connect({})
      bare.send({ type: "auth", token: admin })
      expect(await bare.others.take()).toEqual({ type: "auth_ok" })
      await bare.close()
    })

    it("frames sent right after the auth frame are answered once authenticated", async () => {
      const client = connect({})
      client.send({ type: "auth", token: admin })
      const reqId = randomUUID()
      client.send({ pkg_id: 1, req_id: reqId, data: {} })
      expect((await client.response(reqId)).status_code).toBe(0)
      await client.close()
    })

    it.each([
      { name: "a request", first: { pkg_id: 1, req_id: randomUUID() } },
      { name: "not JSON", first: "not json" },
      { name: "an auth frame without a token", first: { type: "auth" } },
      { name: "an auth frame whose token is not a string", first: { type: "auth", token: 42 } }
    ])("closes 4001 Authentication required when the first frame is not an auth frame: $name", async ({ first }) => {
      const client = connect({})
      client.send(first)
      expect(await client.closed).toEqual({ code: 4001, reason: "Authentication required" })
    })

    it("closes 4001 Invalid or expired token when the auth frame's token is refused", async () => {
      const badToken = connect({})
      badToken.send({ type: "auth", token: "Bearer nope" })
      expect(await badToken.closed).toEqual({ code: 4001, reason: "Invalid or expired token" })
    })

    it("closes 4002 Authentication timeout without an auth frame", async () => {
      expect(await connect({}).closed).toEqual({ code: 4002, reason: "Authentication timeout" })
    })

    it("closes 1008 Origin not allowed; a listed origin and no origin are accepted", async () => {
      expect(await connect({ token: admin, headers: { origin: "https://evil.example" } }).closed).toEqual({
        code: 1008,
        reason: "Origin not allowed"
      })
      const listed = await connected(admin, { headers: { origin: "https://app.example" } })
      const none = await connected(admin)
      await Promise.all([listed.close(), none.close()])
    })

    it("an authenticated user refused for their Origin gets a WS:CONNECT audit record: permission_denied, 403, Origin not allowed", async () => {
      const sub = `ws-origin-${randomUUID()}`
      const token = await tokenFor(["get-authors"], { sub })
      expect(await connect({ token, headers: { origin: "https://evil.example" } }).closed).toEqual({ code: 1008, reason: "Origin not allowed" })
      const record = await awaitAuditDetail(app, admin, `&user_id=${encodeURIComponent(sub)}`, `the WS:CONNECT audit record of ${sub}`)
      expect(record).toMatchObject({
        user_id: sub,
        username: sub,
        action_type: "WS:CONNECT",
        outcome: "permission_denied",
        response_status: 403,
        error_message: "Origin not allowed"
      })
    })

    it("closes 1008 Maximum concurrent connections exceeded past the per-user limit; a closed connection frees its slot", async () => {
      const token = await tokenFor(["get-authors"])
      const held = [await connected(token), await connected(token), await connected(token)]
      for (let i = 0; i < 2; i++) {
        expect(await connect({ token }).closed).toEqual({ code: 1008, reason: "Maximum concurrent connections exceeded" })
      }
      // Rejections released what they counted: after one close, exactly one more fits.
      await held[0]!.close()
      await settled()
      held[0] = await connected(token)
      expect(await connect({ token }).closed).toEqual({ code: 1008, reason: "Maximum concurrent connections exceeded" })
      await Promise.all(held.map((c) => c.close()))
    })

    it("closes 1003 Unsupported format for an unknown format", async () => {
      expect(await connect({ query: { token: admin, format: "xml" } }).closed).toEqual({ code: 1003, reason: "Unsupported format" })
    })

    it("GET /web without an upgrade answers 426; an upgrade on another path is refused with 404", async () => {
      const res = await request(app, "GET", "/web")
      expect(res.status).toBe(426)
      expect(res.body).toEqual({ detail: "WebSocket upgrade required" })
      const other = new WebSocket(`${app.wsUrl}/elsewhere`, { headers: { "x-correlation-id": "corr-ws-404" } })
      other.on("error", () => {})
      const refused = await new Promise<{ status: number; correlationId: unknown }>((resolve) =>
        other.once("unexpected-response", (_q, r) => resolve({ status: r.statusCode ?? 0, correlationId: r.headers["x-correlation-id"] }))
      )
      // docs/http-api.md#conventions: the caller's correlation id comes back on a refused upgrade too.
      expect(refused).toEqual({ status: 404, correlationId: "corr-ws-404" })
    })
  })

  describe("packages", () => {
    let client: WsClient
    const names = [`Zelda ${randomUUID().slice(0, 6)}`, `zeldA Fitzgerald ${randomUUID().slice(0, 6)}`, `Other ${randomUUID().slice(0, 6)}`]
    const created: Array<{ id: number; name: string }> = []

    beforeAll(async () => {
      client = await connected(admin)
      for (const name of names) {
        const r = await client.request(3, { name: `  ${name}  ` })
        expect(r.status_code).toBe(0)
        created.push(r.data as { id: number; name: string })
      }
    })

    it("3 CREATE_AUTHOR: 0 with the author (trimmed); a duplicate is 2 with the 409 text; a bad name is 2 with errors", async () => {
      expect(created.map((a) => a.name)).toEqual(names)
      const author = created[0]!
      expect(author).toMatchObject({ id: expect.any(Number), created_at: expect.stringMatching(/^\d{4}-\d{2}-\d{2}T/) })
      const dup = await client.request(3, { name: names[0] })
      expect(dup).toMatchObject({ pkg_id: 3, status_code: 2, data: { msg: `Author with name ${names[0]} already exists` }, meta: null })
      const empty = await client.request(3, { name: "   " })
      expect(empty).toMatchObject({
        status_code: 2,
        data: { msg: "Invalid request data", errors: [{ loc: ["data", "name"], type: "string_too_short" }] }
      })
      const missing = await client.request(3, {})
      expect(missing.data).toEqual({ msg: "Invalid request data", errors: [{ loc: ["data", "name"], msg: "Field required", type: "missing" }] })
    })

    it("1 GET_AUTHORS: name and search_term are case-insensitive substrings, id exact, ordered by id, meta null", async () => {
      const suffix = names[0]!.split(" ")[1]! // random: only names[0] has it
      const byName = await client.request(1, { filters: { name: "zelda" } })
      expect(byName.status_code).toBe(0)
      expect(byName.meta).toBeNull()
      const found = (byName.data as Array<{ id: number; name: string }>).filter((a) => created.some((c) => c.id === a.id))
      expect(found.map((a) => a.name)).toEqual([names[0], names[1]])
      const ids = (byName.data as Array<{ id: number }>).map((a) => a.id)
      expect(ids).toEqual([...ids].sort((a, b) => a - b))
      const bySearch = await client.request(1, { filters: { search_term: suffix } })
      expect((bySearch.data as Array<{ name: string }>).map((a) => a.name)).toEqual([names[0]])
      const byId = await client.request(1, { filters: { id: created[2]!.id } })
      expect(byId.data).toEqual([created[2]])
      const none = await client.request(1, { filters: { id: -5 } })
      expect(none).toMatchObject({ status_code: 0, data: [], meta: null })
      expect((await client.request(1, { filters: null })).status_code).toBe(0)
      expect((await client.request(1)).status_code).toBe(0)
    })

    it("2 GET_PAGINATED_AUTHORS: offset meta, cursor continuation, past the end", async () => {
      const first = await client.request(2, { page: 1, per_page: 2 })
      expect(first.status_code).toBe(0)
      expect(first.data).toHaveLength(2)
      const meta = first.meta as { total: number; pages: number; next_cursor: string | null; has_more: boolean }
      expect(first.meta).toMatchObject({ page: 1, per_page: 2, has_more: meta.total > 2 })
      expect(meta.pages).toBe(Math.ceil(meta.total / 2))
      expect(typeof meta.next_cursor).toBe("string")
      const next = await client.request(2, { page: 2, per_page: 2, cursor: meta.next_cursor })
      const offsetPage2 = await client.request(2, { page: 2, per_page: 2 })
      expect(next.data).toEqual(offsetPage2.data)
      const past = await client.request(2, { page: 10_000, per_page: 2 })
      expect(past).toMatchObject({ status_code: 0, data: [], meta: { page: 10_000, per_page: 2, total: meta.total, next_cursor: null, has_more: false } })
      const filtered = await client.request(2, { page: 1, per_page: 10, filters: { name: "ZELDA" } })
      expect((filtered.data as Array<{ id: number }>).map((a) => a.id)).toEqual(
        expect.arrayContaining([created[0]!.id, created[1]!.id])
      )
      const clamped = await client.request(2, { page: 1, per_page: 5000 })
      expect(clamped.meta).toMatchObject({ per_page: 1000 })
    })

    it("schema failures: status_code 2 with msg by field and errors", async () => {
      expect((await client.request(2, { page: 0, per_page: 10 })).data).toEqual({
        msg: "Invalid pagination parameters",
        errors: [{ loc: ["data", "page"], msg: "Input should be greater than or equal to 1", type: "greater_than_equal" }]
      })
      expect((await client.request(2, { per_page: 10 })).data).toEqual({
        msg: "Invalid pagination parameters",
        errors: [{ loc: ["data", "page"], msg: "Field required", type: "missing" }]
      })
      expect(((await client.request(2, { page: 1, per_page: "x" })).data as { msg: string }).msg).toBe("Invalid pagination parameters")
      expect(((await client.request(2, { page: 1, per_page: 1, cursor: "bogus" })).data as { msg: string }).msg).toBe(
        "Invalid pagination parameters"
      )
      expect((await client.request(1, { filters: { id: "7" } })).data).toEqual({
        msg: "Invalid filter parameters",
        errors: [{ loc: ["data", "filters", "id"], msg: "Input should be a valid integer", type: "int_type" }]
      })
      expect((await client.request(2, { page: 1, per_page: 1, filters: [] })).data).toMatchObject({ msg: "Invalid filter parameters" })
      expect((await client.request(1, [])).data).toEqual({
        msg: "Invalid request data",
        errors: [{ loc: ["data"], msg: "Input should be a valid dictionary", type: "dict_type" }]
      })
      expect((await client.request(1, {}, { method: 5 })).data).toEqual({
        msg: "Invalid request data",
        errors: [{ loc: ["method"], msg: "Input should be a valid string", type: "string_type" }]
      })
    })

    // page and per_page are 32-bit, as over HTTP: 2147483647 is accepted (per_page clamped), anything above is refused.
    it.each([
      ["page", 2 ** 31 - 1, 0],
      ["page", 2 ** 31, 2],
      ["page", 2 ** 32, 2],
      ["page", 2 ** 52, 2],
      ["per_page", 2 ** 31 - 1, 0],
      ["per_page", 2 ** 31, 2],
      ["per_page", 2 ** 32, 2],
      ["per_page", 2 ** 52, 2]
    ])("2 GET_PAGINATED_AUTHORS %s=%d: status_code %d", async (name, value, status) => {
      // Warmed first: an answer the cache holds for the clamped page is not given for a value above 32 bits.
      expect((await client.request(2, { page: 1, per_page: 1000 })).status_code).toBe(0)
      const r = await client.request(2, { page: 1, per_page: 1, [name]: value })
      if (status === 0) {
        expect(r).toMatchObject({ status_code: 0, meta: name === "page" ? { page: value, per_page: 1 } : { page: 1, per_page: 1000 } })
      } else {
        expect(r).toEqual({
          pkg_id: 2,
          req_id: r.req_id,
          status_code: 2,
          data: {
            msg: "Invalid pagination parameters",
            errors: [{ loc: ["data", name], msg: "Input should be less than or equal to 2147483647", type: "less_than_equal" }]
          },
          meta: null
        })
      }
    })

    it("an unknown pkg_id is status_code 2 with its number", async () => {
      const r = await client.request(99, {})
      expect(r).toEqual({ pkg_id: 99, req_id: r.req_id, status_code: 2, data: { msg: "Unknown pkg_id 99" }, meta: null })
    })

    it("permission: status_code 3 Permission denied, after the schema check", async () => {
      const readerClient = await connected(reader)
      expect(await readerClient.request(3, { name: `Nope ${randomUUID()}` })).toMatchObject({
        status_code: 3,
        data: { msg: "Permission denied" }
      })
      // schema → permission: invalid data is reported even to a caller without the role
      expect((await readerClient.request(3, { name: 5 })).status_code).toBe(2)
      const writer = connect({ token: await tokenFor(["create-author"]) })
      expect((await writer.request(1, {})).data).toEqual({ msg: "Permission denied" })
      await Promise.all([readerClient.close(), writer.close()])
    })
  })

  describe("bad frames", () => {
    const closesWith = async (frame: unknown, expected: { code: number; reason: string }) => {
      const client = await connected(admin)
      client.send(frame)
      expect(await client.closed).toEqual(expected)
    }
    const invalid = { code: 1003, reason: "Invalid message format" }

    it("not JSON, not an object, no integer pkg_id or no UUID req_id → 1003 Invalid message format", async () => {
      await closesWith("{oops", invalid)
      await closesWith(JSON.stringify([1, 2]), invalid)
      await closesWith(JSON.stringify(null), invalid)
      await closesWith({ pkg_id: "1", req_id: randomUUID() }, invalid)
      await closesWith({ pkg_id: 1.5, req_id: randomUUID() }, invalid)
      await closesWith({ pkg_id: 1, req_id: "not-a-uuid" }, invalid)
      await closesWith({ pkg_id: 1 }, invalid)
    })

    it("a binary frame in json format → 1003", async () => {
      await closesWith(new Uint8Array([1, 2, 3]), invalid)
    })

    it("a frame above WS_MAX_MESSAGE_BYTES → 1009; the connection's slot is released", async () => {
      const token = await tokenFor(["get-authors"])
      const client = await connected(token)
      client.send(JSON.stringify({ pkg_id: 1, req_id: randomUUID(), data: { pad: "x".repeat(5000) } }))
      expect((await client.closed).code).toBe(1009)
      await settled()
      const more = await Promise.all([connected(token), connected(token), connected(token)])
      await Promise.all(more.map((c) => c.close()))
    })
  })

  describe("broadcasts", () => {
    it("author created, updated and deleted — over HTTP and over WS — reach every connection allowed to read authors", async () => {
      const listeners = [await connected(reader), await connected(await tokenFor(["get-authors"]))]
      const deaf = connect({ token: await tokenFor(["create-author"]) })
      expect((await deaf.request(1, {})).status_code).toBe(3) // open, but may not read authors
      const name = `Broadcast ${randomUUID()}`
      const creator = await connected(admin)
      const created = await creator.request(3, { name })
      const author = created.data as { id: number; name: string; created_at: string }
      const renamed = await request(app, "PUT", `/authors/${author.id}`, { token: admin, body: { name: `${name} 2` } })
      expect(renamed.status).toBe(200)
      expect((await request(app, "DELETE", `/authors/${author.id}`, { token: admin })).status).toBe(204)
      for (const listener of listeners) {
        const events = [await listener.broadcasts.take(), await listener.broadcasts.take(), await listener.broadcasts.take()]
        expect(events.map((e) => (e.data as { event: string }).event)).toEqual(["author.created", "author.updated", "author.deleted"])
        for (const e of events) {
          expect(e).toMatchObject({ pkg_id: 0, req_id: ZERO_REQ_ID, status_code: 0, meta: null })
          expect((e.data as { timestamp: string }).timestamp).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}/)
        }
        expect((events[0]!.data as { author: unknown }).author).toEqual(author)
        expect((events[1]!.data as { author: { name: string } }).author.name).toBe(`${name} 2`)
      }
      expect(deaf.broadcasts.size).toBe(0)
      await Promise.all([...listeners, deaf, creator].map((c) => c.close()))
    })

    it("a client that does not read is dropped (ws_send_queue_overflows_total); the others still get the broadcast", async () => {
      const overflowsBefore = (await scrapeMetrics(app.url)).firstOrZero("ws_send_queue_overflows_total")
      const seed = await connected(admin)
      const long = "L".repeat(240)
      await Promise.all(Array.from({ length: 200 }, (_, i) => seed.request(3, { name: `${long}${i}-${randomUUID().slice(0, 8)}` })))
      const healthy = await connected(reader)
      await settled()
      const baseline = await activeConnections()
      const slow = await connected(await tokenFor(["get-authors"]))
      const socket = (slow.ws as unknown as { _socket: { pause(): void; resume(): void } })._socket
      socket.pause()
      // ~50 KB per answer; far more than the socket buffers and the 4 MiB send bound.
      for (let i = 0; i < 400; i++) slow.send({ pkg_id: 2, req_id: randomUUID(), data: { page: 1, per_page: 200, filters: { name: long } } })
      const name = `After slow ${randomUUID()}`
      // The server drops the slow client once its buffer passes the bound (no event tells the
      // test: /health's count is watched until the connection is gone).
      await eventually(async () => expect(await activeConnections()).toBeLessThanOrEqual(baseline), "the slow client to be dropped")
      expect((await seed.request(3, { name })).status_code).toBe(0)
      const got = await healthy.broadcasts.take((e) => (e.data as { author: { name: string } }).author.name === name)
      expect(got.status_code).toBe(0)
      socket.resume()
      expect((await slow.closed).code).toBe(1006)
      expect((await scrapeMetrics(app.url)).firstOrZero("ws_send_queue_overflows_total")).toBe(overflowsBefore + 1)
      await Promise.all([seed.close(), healthy.close()])
    })
  })

  describe("sessions", () => {
    it("a session ends at the token's exp: close 4001 Session expired", async () => {
      // 3-4 s out (whole seconds): time enough to connect and be answered on a busy machine.
      const client = await connected(await tokenFor(["get-authors"], { expiresIn: "4s" }))
      expect(await client.closed).toEqual({ code: 4001, reason: "Session expired" })
    })

    it("a re-auth frame of the same user extends the session; another user's token closes 4001 Token subject mismatch", async () => {
      const sub = `ws-reauth-${randomUUID()}`
      const shortExp = Math.floor(Date.now() / 1000) + 4
      const [short, long] = await Promise.all([
        tokenFor(["get-authors"], { sub, expiresIn: shortExp }),
        tokenFor(["get-authors"], { sub, expiresIn: "1h" })
      ])
      // The re-auth frame goes out right behind the upgrade: the server handles it as soon as the
      // handshake is done, however long that takes — not "before the short token ends".
      const client = connect({ token: short })
      client.send({ type: "auth", token: long })
      expect(await client.others.take()).toEqual({ type: "auth_ok" })
      // A control connection whose token ends when the short one does (the same exp): once the
      // server closed it, the short token's end has passed too — an event, not a sleep — and the
      // re-authenticated connection must still be open.
      const control = await connected(await tokenFor(["get-authors"], { expiresIn: shortExp }))
      expect(await control.closed).toEqual({ code: 4001, reason: "Session expired" })
      expect((await client.request(1, {})).status_code).toBe(0)
      client.send({ type: "auth", token: admin })
      expect(await client.closed).toEqual({ code: 4001, reason: "Token subject mismatch" })
    })

    it("a re-auth frame with an invalid token closes 4001 Invalid or expired token", async () => {
      const client = await connected(await tokenFor(["get-authors"]))
      client.send({ type: "auth", token: "Bearer broken" })
      expect(await client.closed).toEqual({ code: 4001, reason: "Invalid or expired token" })
    })
  })

  describe("protobuf", () => {
    let codec: ProtoCodec

    beforeAll(async () => {
      const res = await fetch(`${app.url}/proto/websocket.proto`)
      expect(res.status).toBe(200)
      codec = protoCodec(await res.text())
    })

    it("frames decode with a decoder built from the served .proto: responses with meta, broadcasts as Response", async () => {
      const client = connect({ token: admin, proto: codec })
      const created = await client.request(3, { name: `Proto ${randomUUID()}` })
      expect(created).toMatchObject({ pkg_id: 3, status_code: 0, meta: null })
      const page = await client.request(2, { page: 1, per_page: 1 })
      expect(page.status_code).toBe(0)
      expect(page.data).toHaveLength(1)
      expect(page.meta).toMatchObject({ page: 1, per_page: 1, has_more: true })
      expect(typeof page.meta!["next_cursor"]).toBe("string")
      const broadcast = await client.broadcasts.take()
      expect(broadcast).toMatchObject({ pkg_id: 0, req_id: ZERO_REQ_ID, status_code: 0, data: { event: "author.created", author: created.data } })
      const denied = await connect({ token: reader, proto: codec }).request(3, { name: "x" })
      expect(denied).toMatchObject({ status_code: 3, data: { msg: "Permission denied" } })
      await client.close()
    })

    it("on the last page meta.next_cursor is the empty string (a decoder showing proto3 defaults)", async () => {
      const withDefaults = protoCodec(await (await fetch(`${app.url}/proto/websocket.proto`)).text(), { defaults: true })
      const name = `Proto last ${randomUUID()}`
      const client = connect({ token: admin, proto: withDefaults })
      expect(await client.request(3, { name })).toMatchObject({ status_code: 0 })
      const last = await client.request(2, { page: 1, per_page: 1, filters: { name } })
      expect(last).toMatchObject({ status_code: 0, data: [{ name }] })
      expect(last.meta).toEqual({ page: 1, per_page: 1, total: 1, pages: 1, next_cursor: "", has_more: false })
      await client.close()
    })

    it("auth frames stay JSON; data_json that is not JSON is status_code 2", async () => {
      const client = connect({ proto: codec, query: { format: "protobuf" } })
      client.send({ type: "auth", token: admin })
      expect(await client.others.take()).toEqual({ type: "auth_ok" })
      const reqId = randomUUID()
      client.send(codec.encodeRequest(1, reqId, "{not json"))
      expect(await client.response(reqId)).toMatchObject({
        status_code: 2,
        data: { msg: "Invalid request data", errors: [{ loc: ["data"], type: "json_invalid" }] }
      })
      await client.close()
    })

    it("undecodable binary frames and text frames other than auth close 1003", async () => {
      const garbage = connect({ token: admin, proto: codec })
      expect((await garbage.request(1, {})).status_code).toBe(0)
      garbage.send(new Uint8Array([0x0a, 0xff, 0xff, 0xff]))
      expect(await garbage.closed).toEqual({ code: 1003, reason: "Invalid message format" })
      const text = connect({ token: admin, proto: codec })
      expect((await text.request(1, {})).status_code).toBe(0)
      text.send({ pkg_id: 1, req_id: randomUUID() })
      expect(await text.closed).toEqual({ code: 1003, reason: "Invalid message format" })
    })
  })

  describe("health and audit", () => {
    it("/health reports this instance's open connections", async () => {
      await settled()
      const before = await activeConnections()
      const opened = [await connected(await tokenFor(["get-authors"])), await connected(await tokenFor(["get-authors"]))]
      expect((await request(app, "GET", "/health")).body).toMatchObject({
        status: "healthy",
        websocket: { status: "healthy", active_connections: before + 2 }
      })
      await Promise.all(opened.map((c) => c.close()))
      await settled()
      expect(await activeConnections()).toBe(before)
    })

    it("every processed message is audited (WS:<package>, ws:/web, req_id, outcome); so is a connection refused over the limit", async () => {
      const sub = `ws-audited-${randomUUID()}`
      const token = await tokenFor(["get-authors"], { sub })
      const client = connect({ token, headers: { "x-correlation-id": "ws-audit-corr" } })
      const ok = await client.request(2, { page: 1, per_page: 5 })
      const denied = await client.request(3, { name: "x", password: "hunter2" })
      await settled()
      const held = [client, await connected(token), await connected(token)]
      expect(await connect({ token }).closed).toMatchObject({ code: 1008 })
      const items = await eventually(async () => {
        const res = await request(app, "GET", `/audit-logs/user/${sub}?per_page=100`, { token: admin })
        const listed = (res.body as { items: Array<Record<string, unknown>> }).items
        // The two messages, the refused connection (written last), and the held connections' probes.
        expect(listed.map((i) => i["action_type"])).toEqual(expect.arrayContaining(["WS:GET_PAGINATED_AUTHORS", "WS:CREATE_AUTHOR", "WS:CONNECT"]))
        return listed
      }, "the records of both messages and of the refused connection")
      const byAction = (action: string) => items.filter((i) => i["action_type"] === action)
      expect(byAction("WS:GET_PAGINATED_AUTHORS")[0]).toMatchObject({ resource: "ws:/web", outcome: "success", response_status: 200 })
      expect(byAction("WS:CREATE_AUTHOR")[0]).toMatchObject({ outcome: "permission_denied", response_status: 403 })
      expect(byAction("WS:CONNECT")[0]).toMatchObject({ outcome: "error", response_status: 429 })
      const list = await request(app, "GET", `/audit-logs?user_id=${sub}&action_type=WS:CREATE_AUTHOR`, { token: admin })
      const id = (list.body as { items: Array<{ id: number; request_id: string }> }).items[0]!
      expect(id.request_id).toBe(denied.req_id)
      const detail = await request(app, "GET", `/audit-logs/${id.id}`, { token: admin })
      expect(detail.body).toMatchObject({
        correlation_id: "ws-audit-corr",
        request_data: { body: { name: "x", password: "[REDACTED]" } },
        error_message: "Permission denied"
      })
      expect(ok.status_code).toBe(0)
      await Promise.all(held.map((c) => c.close()))
    })
  })

  describe("shutdown", () => {
    it("closing the service closes every connection 1001 Server shutting down", async () => {
      const other = await startTestApp({ config: storeConfig(store) })
      try {
        const token = await signToken(other, { sub: "shutdown-user", roles: ["get-authors"] })
        const client = connectWs(other.url, { token })
        expect((await client.request(1, {})).status_code).toBe(0)
        const closing = other.close()
        expect(await client.closed).toEqual({ code: 1001, reason: "Server shutting down" })
        await closing
      } catch (error) {
        await other.close().catch(() => {})
        throw error
      }
    })
  })
})

describe.each(stores)("WebSocket message rate limit (%s stores)", (store) => {
  let app: TestApp
  beforeAll(async () => {
    app = await startTestApp({ config: { ...storeConfig(store), rateLimitEnabled: false, wsMessageRateLimit: 3 } })
  })
  afterAll(() => app.close())

  it("over WS_MESSAGE_RATE_LIMIT per 60 s (all the user's connections): status_code 1 with retry_after; flooding closes 1008", async () => {
    const token = await signToken(app, { sub: `flood-${randomUUID()}`, roles: ["get-authors"] })
    const a = connectWs(app.url, { token })
    const b = connectWs(app.url, { token })
    const answers: Array<Envelope> = []
    for (const client of [a, a, b]) answers.push(await client.request(1, {}))
    expect(answers.map((r) => r.status_code)).toEqual([0, 0, 0])
    // The budget is the user's: b is refused as well as a.
    const refused = await b.request(1, {})
    expect(refused).toMatchObject({ status_code: 1, data: { msg: "Rate limit exceeded", retry_after: expect.any(Number) }, meta: null })
    expect((refused.data as { retry_after: number }).retry_after).toBeGreaterThanOrEqual(1)
    expect((await a.request(1, {})).status_code).toBe(1)
    expect((await a.request(1, {})).status_code).toBe(1)
    // a's third refusal in the window: it floods.
    a.send({ pkg_id: 1, req_id: randomUUID(), data: {} })
    expect(await a.closed).toEqual({ code: 1008, reason: "Message rate limit exceeded" })
    await b.close()
  })

  it("re-auth frames count as messages: over the limit one is not answered, and refusals close 1008", async () => {
    const token = await signToken(app, { sub: `reauth-flood-${randomUUID()}`, roles: ["get-authors"] })
    const client = connectWs(app.url, { token })
    for (let i = 0; i < 3; i++) {
      client.send({ type: "auth", token })
      expect(await client.others.take()).toEqual({ type: "auth_ok" })
    }
    // The budget of 3 went to the re-auth frames: the next one is refused, so is the request.
    client.send({ type: "auth", token })
    expect(await client.request(1, {})).toMatchObject({ status_code: 1, data: { msg: "Rate limit exceeded" } })
    // Frames are answered in order: an auth_ok for the refused re-auth would have come first.
    expect(client.others.size).toBe(0)
    // The third refusal in the window: flooding.
    client.send({ type: "auth", token })
    expect(await client.closed).toEqual({ code: 1008, reason: "Message rate limit exceeded" })
  })
})
