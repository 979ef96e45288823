/**
 * The client kit as its package (`@author-directory/client`, packages/client/dist, built from
 * src/Client by the test run's setup) against a running service: the typed HTTP client built from
 * `Api` (login, typed successes and errors, cursor paging, token refresh), the Promise facade, and
 * the `/web` client on the standard WebSocket (JSON and protobuf, broadcasts, re-authentication,
 * reconnection after the connection drops).
 */
import { Effect, Stream } from "effect"
import { randomUUID } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  type AuthorDirectoryClient,
  AuthorNameTaken,
  AuthorNotFound,
  type BroadcastEvent,
  connectWs,
  createClient,
  Forbidden,
  makeClient,
  memoryTokenStore,
  Unauthenticated,
  ValidationError,
  type WsClient,
  type WsState
} from "@author-directory/client"
import { startTcpProxy, type TcpProxy } from "../support/TcpProxy.ts"
import { signToken, startTestApp, type TestApp } from "../support/TestApp.ts"

const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(effect)
/** The failure of an effect expected to fail (its value if it succeeded, to fail the assertion). */
const failure = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(Effect.match(effect, { onFailure: (e) => e, onSuccess: (a) => a }))

/** A promise settled by the first call of a callback that satisfies `match`. */
const event = <A>() => {
  let listeners: Array<{ match: (a: A) => boolean; resolve: (a: A) => void }> = []
  return {
    emit: (a: A) => {
      const hit = listeners.filter((l) => l.match(a))
      listeners = listeners.filter((l) => !l.match(a))
      for (const l of hit) l.resolve(a)
    },
    next: (match: (a: A) => boolean) => new Promise<A>((resolve) => listeners.push({ match, resolve }))
  }
}

describe("client kit", () => {
  let app: TestApp
  let admin: AuthorDirectoryClient
  const sockets: Array<WsClient> = []
  const unique = (prefix: string) => `${prefix} ${randomUUID().slice(0, 8)}`

  beforeAll(async () => {
    app = await startTestApp()
    admin = await run(makeClient({ baseUrl: app.url }))
    await run(admin.login("admin", "admin"))
  })

  afterAll(async () => {
    await Promise.all(sockets.map((s) => s.close()))
    await app?.close()
  })

  describe("HTTP", () => {
    it("lists and creates authors with the types of Api (201)", async () => {
      const name = unique("Ada")
      const [created, response] = await run(
        admin.api.authors.create({ payload: { name }, responseMode: "decoded-and-response" })
      )
      expect(response.status).toBe(201)
      expect(created).toMatchObject({ name })
      expect(typeof created.id).toBe("number")
      const listed = await run(admin.api.authors.list({ query: { search: name } }))
      expect(listed.map((a) => a.id)).toEqual([created.id])
      const page = await run(admin.api.authors.paginated({ query: { page: 1, per_page: 1 } }))
      expect(page.meta).toMatchObject({ page: 1, per_page: 1 })
    })

    it("gets one author by id, and an unknown id is the typed 404", async () => {
      const created = await run(admin.api.authors.create({ payload: { name: unique("Lovelace") } }))
      expect(await run(admin.api.authors.get({ params: { author_id: created.id } }))).toEqual(created)
      const error = await failure(admin.api.authors.get({ params: { author_id: 987_654_321 } }))
      expect(error).toBeInstanceOf(AuthorNotFound)
      expect(error).toMatchObject({ detail: "Author with ID 987654321 not found" })
    })

    it("answers a duplicate name with the typed 409 error", async () => {
      const name = unique("Grace")
      await run(admin.api.authors.create({ payload: { name } }))
      const error = await failure(admin.api.authors.create({ payload: { name } }))
      expect(error).toBeInstanceOf(AuthorNameTaken)
      expect(error).toMatchObject({ detail: `Author with name ${name} already exists` })
    })

    it("answers a reader creating with the typed 403, and no login with the typed 401", async () => {
      const reader = await run(makeClient({ baseUrl: app.url }))
      const anonymous = await failure(reader.api.authors.list({ query: {} }))
      expect(anonymous).toBeInstanceOf(Unauthenticated)
      await run(reader.login("reader", "reader"))
      expect(Array.isArray(await run(reader.api.authors.list({ query: {} })))).toBe(true)
      const error = await failure(reader.api.authors.create({ payload: { name: unique("Nope") } }))
      expect(error).toBeInstanceOf(Forbidden)
      expect(error).toMatchObject({ detail: "Forbidden" })
    })

    it("pages by cursor with meta.next_cursor passed straight back", async () => {
      for (let i = 0; i < 5; i++) await run(admin.api.authors.create({ payload: { name: unique("Paged") } }))
      const everyone = (await run(admin.api.authors.list({ query: {} }))).map((a) => a.id)
      expect(everyone.length).toBeGreaterThan(4)
      const first = await run(admin.api.authors.paginated({ query: { per_page: 2 } }))
      expect(first.items.map((a) => a.id)).toEqual(everyone.slice(0, 2))
      expect(first.meta).toMatchObject({ page: 1, per_page: 2, total: everyone.length, has_more: true })
      expect(typeof first.meta.next_cursor).toBe("string")
      let page = first
      const seen = [...first.items.map((a) => a.id)]
      while (page.meta.next_cursor !== null) {
        page = await run(admin.api.authors.paginated({ query: { per_page: 2, cursor: page.meta.next_cursor } }))
        seen.push(...page.items.map((a) => a.id))
      }
      expect(seen).toEqual(everyone)
      expect(page.meta.has_more).toBe(false)
    })

    it("walks every page with authorPages, and an invalid cursor is the server's 422", async () => {
      const everyone = (await run(admin.api.authors.list({ query: {} }))).map((a) => a.id)
      const pages = Array.from(await run(Stream.runCollect(admin.authorPages({ per_page: 3 }))))
      expect(pages.length).toBe(Math.ceil(everyone.length / 3))
      expect(pages.flatMap((p) => p.items.map((a) => a.id))).toEqual(everyone)
      expect(pages.map((p) => p.meta.has_more)).toEqual([...pages.slice(1).map(() => true), false])
      // Filters apply to every page.
      const [one] = everyone
      const filtered = Array.from(await run(Stream.runCollect(admin.authorPages({ id: one! }))))
      expect(filtered.map((p) => p.items.map((a) => a.id))).toEqual([[one]])

      const error = await failure(admin.api.authors.paginated({ query: { cursor: "not-a-cursor" } }))
      expect(error).toMatchObject({ detail: [{ loc: ["query", "cursor"], msg: "Invalid cursor", type: "value_error" }] })
    })

    it("refreshes an expired access token before the call", async () => {
      const store = memoryTokenStore()
      let writes = 0
      const counting = { get: store.get, set: (t: Parameters<typeof store.set>[0]) => (writes++, store.set(t)) }
      const editor = await run(makeClient({ baseUrl: app.url, tokenStore: counting }))
      await run(editor.login("editor", "editor"))
      const tokens = store.get()!
      // An unusable access token that has expired: the call only succeeds if it was refreshed.
      store.set({ ...tokens, accessToken: "expired", accessExpiresAt: Date.now() - 1 })
      writes = 0
      const created = await run(editor.api.authors.create({ payload: { name: unique("Refreshed") } }))
      expect(created.id).toBeGreaterThan(0)
      expect(writes).toBe(1)
      expect(store.get()!.accessToken).not.toBe("expired")
      expect(store.get()!.accessExpiresAt).toBeGreaterThan(Date.now())
    })
  })

  describe("Promise facade", () => {
    /** The rejection of a promise expected to reject (its value if it resolved, to fail the assertion). */
    const rejection = (promise: Promise<unknown>) => promise.then((value) => value, (error: unknown) => error)

    it("logs in, creates, reads, renames and deletes, rejecting with the declared errors' classes", async () => {
      const client = createClient({ baseUrl: app.url })
      expect(await rejection(client.authors.list())).toBeInstanceOf(Unauthenticated)
      const tokens = await client.login("admin", "admin")
      expect(tokens).toMatchObject({ token_type: "Bearer", expires_in: 300 })

      const name = unique("Promise")
      const created = await client.authors.create({ name })
      expect(created).toEqual({ id: expect.any(Number), name, created_at: expect.any(String) })
      expect(await client.authors.get(created.id)).toEqual(created)
      expect(await client.authors.list({ search: name })).toEqual([created])
      const page = await client.authors.page({ id: created.id })
      expect(page.items).toEqual([created])
      expect(page.meta).toMatchObject({ page: 1, total: 1, next_cursor: null, has_more: false })

      const taken = await rejection(client.authors.create({ name }))
      expect(taken).toBeInstanceOf(AuthorNameTaken)
      expect(taken).toMatchObject({ _tag: "AuthorNameTaken", detail: `Author with name ${name} already exists` })
      const invalid = await rejection(client.authors.create({ name: "   " }))
      expect(invalid).toBeInstanceOf(ValidationError)
      expect(invalid).toBeInstanceOf(Error)
      expect(invalid).toMatchObject({ detail: [{ loc: ["body", "name"], type: "string_too_short" }] })

      const renamed = await client.authors.update(created.id, { name: `${name} renamed` })
      expect(renamed).toEqual({ ...created, name: `${name} renamed` })
      expect(await client.authors.delete(created.id)).toBeUndefined()
      expect(await rejection(client.authors.get(created.id))).toBeInstanceOf(AuthorNotFound)

      client.logout()
      expect(await rejection(client.authors.list())).toBeInstanceOf(Unauthenticated)
    })

    it("opens the /web client with the session's token and receives the broadcast of its own create", async () => {
      const client = createClient({ baseUrl: app.url })
      await client.login("editor", "editor")
      const broadcasts = event<BroadcastEvent>()
      const socket = await client.connectWs({ format: "protobuf", onBroadcast: broadcasts.emit })
      sockets.push(socket)
      const name = unique("Facade")
      const arrived = broadcasts.next((b) => b.author.name === name)
      const answer = await socket.request<{ id: number; name: string }>(3, { name })
      expect(answer).toMatchObject({ pkg_id: 3, status_code: 0, data: { name } })
      expect(await arrived).toMatchObject({ event: "author.created", author: { id: answer.data.id, name } })
      await socket.close()
    })
  })

  describe("WebSocket", () => {
    const token = () => run(admin.accessToken)
    const connect = async (options: Omit<Parameters<typeof connectWs>[0], "token"> & { token?: () => Promise<string> }) => {
      const socket = await connectWs({ token, ...options })
      sockets.push(socket)
      return socket
    }

    it.each(["json", "protobuf"] as const)("answers package 2 with meta (%s)", async (format) => {
      await run(admin.api.authors.create({ payload: { name: unique("Page") } }))
      const socket = await connect({ url: app.url, format })
      const response = await socket.request(2, { page: 1, per_page: 1 })
      expect(response.status_code).toBe(0)
      expect(response.pkg_id).toBe(2)
      expect(response.meta).toMatchObject({ page: 1, per_page: 1, has_more: true })
      expect(response.meta!.total).toBeGreaterThan(1)
      expect(typeof response.meta!.next_cursor).toBe("string")
      await socket.close()
    })

    it("delivers the broadcast of a create", async () => {
      const broadcasts = event<BroadcastEvent>()
      const socket = await connect({ url: app.url, onBroadcast: broadcasts.emit })
      const name = unique("Broadcast")
      const arrived = broadcasts.next((b) => b.author.name === name)
      const created = await run(admin.api.authors.create({ payload: { name } }))
      expect(await arrived).toMatchObject({ event: "author.created", author: { id: created.id, name } })
      await socket.close()
    })

    it("re-authenticates with a fresh token before exp", async () => {
      const sub = `client-test-${randomUUID()}`
      const tokens: Array<string> = []
      const issued = event<number>()
      const provider = async () => {
        const t = await signToken(app, { sub, preferred_username: sub, roles: ["get-authors"] }, { expiresIn: "12s" })
        tokens.push(t)
        issued.emit(tokens.length)
        return t
      }
      const reauthed = issued.next((n) => n === 2)
      // Re-auth 11 s before a 12 s token's exp: about a second after connecting.
      const socket = await connect({ url: app.url, token: provider, reauthBeforeSeconds: 11 })
      await reauthed
      const response = await socket.request(1, { filters: { id: -1 } })
      expect(response.status_code).toBe(0)
      expect(socket.state()).toBe("open")
      await socket.close()
    })

    describe("reconnection", () => {
      let proxy: TcpProxy
      beforeAll(async () => {
        proxy = await startTcpProxy("127.0.0.1", Number(new URL(app.url).port))
      })
      afterAll(() => proxy?.close())

      it("reconnects after the connection drops, and serves requests again", async () => {
        const states = event<WsState>()
        // The delays are drawn from the given source (src/Client/WsProtocol.ts reconnectDelay; unit: ws.backoff).
        let draws = 0
        const socket = await connect({
          url: `http://127.0.0.1:${proxy.port}`,
          onStateChange: states.emit,
          reconnect: {
            initialDelayMs: 50,
            maxDelayMs: 500,
            maxAttempts: 20,
            random: () => {
              draws++
              return 0.5
            }
          }
        })
        expect((await socket.request(1, { filters: { id: -1 } })).status_code).toBe(0)
        const reconnecting = states.next((s) => s === "reconnecting")
        await proxy.cut()
        await reconnecting
        const reopened = states.next((s) => s === "open")
        // A request made while reconnecting waits for the new connection.
        const answered = socket.request(1, { filters: { id: -1 } })
        await proxy.restore()
        await reopened
        expect((await answered).status_code).toBe(0)
        expect(draws).toBeGreaterThanOrEqual(1)
        await socket.close()
        expect(socket.state()).toBe("closed")
      })
    })
  })
})
