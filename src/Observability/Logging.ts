/** Effect's logger as JSON lines (production) or pretty (development), at `LOG_LEVEL`. */
import { Effect, Layer, Logger, LogLevel } from "effect"
import { AppConfig } from "../Config.js"

const levels = {
  trace: LogLevel.Trace,
  debug: LogLevel.Debug,
  info: LogLevel.Info,
  warning: LogLevel.Warning,
  error: LogLevel.Error,
  fatal: LogLevel.Fatal,
  none: LogLevel.None
} as const

export const LoggerLive = Layer.unwrapEffect(Effect.map(AppConfig, (config) =>
  Layer.merge(
    config.logFormat === "json" ? Logger.json : Logger.pretty,
    Logger.minimumLogLevel(levels[config.logLevel])
  )
))
