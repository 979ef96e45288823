/**
 * The client kit: the typed HTTP client (built from the same `Api` the service serves) and the
 * `/web` WebSocket client. `import { makeClient, connectWs } from "author-directory-service"`.
 */
export * from "./Http.ts"
export * from "./Ws.ts"
