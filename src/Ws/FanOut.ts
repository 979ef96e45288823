/**
 * What the connection registry delivers to this instance's sockets (docs/websocket.md#broadcasts):
 * an author change goes to every open connection allowed to read authors, encoded once per
 * format; a session expiry (docs/websocket.md#sessions) closes its connection 4001. The registry calls it for changes and
 * expiries from every instance (docs/websocket.md#many-instances).
 */
import { hasRoles } from "../Auth/Rbac.ts"
import { OperationRoles } from "../Domain/User.ts"
import { WsStatus } from "../Errors.ts"
import { encodeReply } from "./Dispatch.ts"
import { BROADCAST_REQ_ID, Close } from "./Protocol.ts"
import type { RegistryListener } from "./RegistryBase.ts"
import type { Sockets } from "./Sockets.ts"

export const makeFanOut = (sockets: Pick<Sockets, "open" | "get">): RegistryListener => ({
  onBroadcast: (message) => {
    const frame = { status: WsStatus.OK, data: message, meta: null }
    let json: string | Uint8Array | undefined
    let protobuf: string | Uint8Array | undefined
    for (const conn of sockets.open()) {
      const user = conn.user()
      if (!conn.isOpen() || user === undefined || !hasRoles(user, OperationRoles.listAuthors)) continue
      if (conn.format === "json") conn.send(json ??= encodeReply("json", 0, BROADCAST_REQ_ID, frame))
      else conn.send(protobuf ??= encodeReply("protobuf", 0, BROADCAST_REQ_ID, frame))
    }
  },
  onSessionExpired: (connectionId) => sockets.get(connectionId)?.close(Close.SessionExpired)
})
