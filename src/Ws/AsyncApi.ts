/**
 * `/asyncapi.json` (docs/operations.md#api-documentation): an AsyncAPI 3.0 document of the `/web` WebSocket protocol,
 * generated from the very Effect Schemas the server decodes and encodes with (their JSON Schema, all
 * compiled together so that named schemas become shared `components.schemas`), so the description
 * cannot drift from the implementation. Public, not rate limited, not in OpenAPI.
 */
import { JsonSchema, Schema, SchemaRepresentation } from "effect"
import type { PackageDescription } from "./Packages.ts"
import type { CloseCode } from "./Protocol.ts"

export interface StatusCode {
  readonly code: number
  readonly name: string
  readonly meaning: string
}

export interface WsProtocolDescription {
  readonly title: string
  readonly version: string
  readonly requestEnvelope: Schema.Top
  readonly responseEnvelope: Schema.Top
  readonly broadcast: Schema.Top
  readonly authFrame: Schema.Top
  readonly authOk: Schema.Top
  readonly packages: ReadonlyArray<PackageDescription>
  readonly statusCodes: ReadonlyArray<StatusCode>
  readonly closeCodes: ReadonlyArray<CloseCode>
  readonly broadcastEvents: ReadonlyArray<string>
  readonly protobufUrl: string
}

type Json = Record<string, unknown>

/**
 * The JSON Schemas of `schemas` (the wire form, as `Schema.toJsonSchemaDocument` describes it), in
 * one pass so that they share their definitions, with `$ref`s to `#/components/schemas/<identifier>`.
 */
const compile = (schemas: readonly [Schema.Top, ...Array<Schema.Top>]) => {
  const [first, ...rest] = schemas.map((s) => Schema.toCodecJson(s).ast)
  const representations = SchemaRepresentation.toRepresentations([first!, ...rest])
  return JsonSchema.toMultiDocumentOpenApi3_1(SchemaRepresentation.toJsonSchemaMultiDocument(representations))
}

export const makeAsyncApi = (d: WsProtocolDescription): Json => {
  const roots: readonly [Schema.Top, ...Array<Schema.Top>] = [
    d.requestEnvelope,
    d.responseEnvelope,
    d.broadcast,
    d.authFrame,
    d.authOk,
    ...d.packages.flatMap((p) => [p.request, p.response])
  ]
  const compiled = compile(roots)
  const definitions = compiled.definitions
  const schema = (s: Schema.Top): JsonSchema.JsonSchema => {
    const index = roots.indexOf(s)
    if (index < 0) throw new Error("AsyncAPI: a schema outside the compiled set")
    return compiled.schemas[index]!
  }

  const message = (name: string, title: string, summary: string, payload: unknown, extra: Json = {}) => ({
    name,
    title,
    summary,
    contentType: "application/json",
    payload,
    ...extra
  })

  const messages: Record<string, Json> = {}
  const requestRefs: Array<Json> = []
  const replyRefs: Array<Json> = []
  for (const p of d.packages) {
    const requestName = `${p.name}_request`
    const responseName = `${p.name}_response`
    messages[requestName] = message(
      requestName,
      `${p.name} (pkg_id ${p.pkgId}) request`,
      `${p.summary} Requires role${p.roles.length > 1 ? "s" : ""} ${p.roles.join(", ")}.`,
      {
        allOf: [schema(d.requestEnvelope), {
          type: "object",
          properties: { pkg_id: { const: p.pkgId }, data: schema(p.request) }
        }]
      },
      { "x-pkg-id": p.pkgId, "x-roles": p.roles }
    )
    messages[responseName] = message(
      responseName,
      `${p.name} (pkg_id ${p.pkgId}) response`,
      `Same pkg_id and req_id as the request; data on status_code 0, error details ({msg}) otherwise.`,
      {
        allOf: [schema(d.responseEnvelope), {
          type: "object",
          properties: { pkg_id: { const: p.pkgId }, data: { anyOf: [schema(p.response), { type: "object", properties: { msg: { type: "string" } } }] } }
        }]
      },
      { "x-pkg-id": p.pkgId }
    )
    requestRefs.push({ $ref: `#/channels/web/messages/${requestName}` })
    replyRefs.push({ $ref: `#/channels/web/messages/${responseName}` })
  }
  messages["broadcast"] = message(
    "broadcast",
    "Broadcast",
    `Sent by the server to every connection allowed to read authors; req_id is all zeros. Events: ${d.broadcastEvents.join(", ")}.`,
    schema(d.broadcast),
    { "x-events": d.broadcastEvents }
  )
  messages["auth"] = message("auth", "Authentication frame", "First frame when no token is in the query; also re-authenticates an open connection.", schema(d.authFrame))
  requestRefs.push({ $ref: "#/channels/web/messages/auth" })
  messages["auth_ok"] = message("auth_ok", "Authentication accepted", "Answer to an accepted auth frame.", schema(d.authOk))
  replyRefs.push({ $ref: "#/channels/web/messages/auth_ok" })

  const closeTable = d.closeCodes.map((c) => `- ${c.code} \`${c.reason}\`: ${c.when}`).join("\n")
  const statusTable = d.statusCodes.map((s) => `- ${s.code} ${s.name}: ${s.meaning}`).join("\n")

  return {
    asyncapi: "3.0.0",
    info: {
      title: d.title,
      version: d.version,
      description: `The \`/web\` WebSocket protocol. Every client message is a request envelope answered by a response envelope with the same pkg_id and req_id.\n\nResponse status codes:\n${statusTable}\n\nClose codes:\n${closeTable}`
    },
    defaultContentType: "application/json",
    servers: {
      local: { host: "localhost:8000", protocol: "ws", description: "The service (same host and port as HTTP; wss behind TLS)." }
    },
    channels: {
      web: {
        address: "/web",
        title: "Author Directory WebSocket",
        description: "Authenticate with the query parameter Authorization=Bearer <jwt> (or token / access_token), or with an auth frame first.",
        messages,
        bindings: {
          ws: {
            bindingVersion: "0.1.0",
            query: {
              type: "object",
              properties: {
                Authorization: { type: "string", description: "URL-encoded `Bearer <ACCESS_TOKEN>`" },
                token: { type: "string" },
                access_token: { type: "string" },
                format: { type: "string", enum: ["json", "protobuf"], default: "json" }
              }
            }
          }
        },
        "x-close-codes": d.closeCodes,
        "x-status-codes": d.statusCodes,
        "x-protobuf-schema": d.protobufUrl
      }
    },
    operations: {
      request: {
        action: "receive",
        title: "Send a request",
        channel: { $ref: "#/channels/web" },
        messages: requestRefs,
        reply: { channel: { $ref: "#/channels/web" }, messages: replyRefs }
      },
      broadcast: {
        action: "send",
        title: "Receive broadcasts",
        channel: { $ref: "#/channels/web" },
        messages: [{ $ref: "#/channels/web/messages/broadcast" }]
      }
    },
    components: { schemas: definitions }
  }
}
