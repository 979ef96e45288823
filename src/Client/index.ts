/**
 * The client kit, published as the package `@author-directory/client` (packages/client): the
 * typed HTTP client built from the same `Api` the service serves (Effect), its Promise facade, and
 * the `/web` WebSocket client. Loads no server code and uses only standard globals (fetch,
 * WebSocket, crypto), so it runs in browsers, Node, Deno and Bun.
 */
export * from "./Http.ts"
export * from "./Promise.ts"
export * from "./Ws.ts"
export * from "./WsProtocol.ts"
