/**
 * A span around an effect only when tracing is on. `Effect.withSpan` with the tracer disabled
 * still builds a no-op span, registers its end on the fiber and provides it as the parent: a few
 * µs on every Redis command and WebSocket message. With no exporter configured
 * (Observability/Tracing.ts sets `TracerEnabled` to false) this runs the effect as it is, and the
 * span's options (`options`, called only when traced) are not even built.
 */
import { Effect, References, type Tracer } from "effect"

export const withSpanIfTraced = <A, E, R>(
  self: Effect.Effect<A, E, R>,
  name: string,
  options: () => Tracer.SpanOptionsNoTrace
): Effect.Effect<A, E, Exclude<R, Tracer.ParentSpan>> =>
  Effect.withFiber((fiber) =>
    fiber.getRef(References.TracerEnabled)
      ? Effect.withSpan(self, name, { ...options(), captureStackTrace: false })
      : self as Effect.Effect<A, E, Exclude<R, Tracer.ParentSpan>>
  )
