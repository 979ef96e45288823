/**
 * Shell blocks of the docs run as a reader runs them: one bash, fed one command at a time as they
 * would be pasted (variables and the working directory carry over), each command's output, stderr
 * and exit status kept. Used by test/examples/readme.test.ts and the client kit's install test.
 */
import { spawn } from "node:child_process"
import { randomUUID } from "node:crypto"

export interface Step {
  readonly label: string
  readonly command: string
  readonly output: string
  readonly status: number
  readonly stderr: string
}

/** One bash in `cwd` with exactly the environment `env`. */
export const startShell = (cwd: string, env: Record<string, string>) => {
  const child = spawn("bash", ["--noprofile", "--norc"], { cwd, env, stdio: "pipe" })
  let stdout = ""
  let stderr = ""
  const listeners = new Set<() => void>()
  child.stdout.on("data", (d: Buffer) => {
    stdout += d.toString()
    for (const listener of listeners) listener()
  })
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()))
  let failRunning: ((error: Error) => void) | undefined
  child.on("exit", (code) => failRunning?.(new Error(`the shell exited (${code})`)))
  const run = (label: string, command: string) =>
    new Promise<Step>((resolve, reject) => {
      const marker = `::done-${randomUUID()}::`
      const from = stdout.length
      const errFrom = stderr.length
      const done = new RegExp(`\\n${marker} (\\d+)\\n`)
      const check = () => {
        const match = done.exec(stdout.slice(from))
        if (match === null) return
        listeners.delete(check)
        failRunning = undefined
        resolve({ label, command, output: stdout.slice(from, from + match.index), status: Number(match[1]), stderr: stderr.slice(errFrom) })
      }
      listeners.add(check)
      failRunning = (error) => reject(new Error(`${error.message} during: ${command}`))
      child.stdin.write(`${command}\nprintf '\\n${marker} %s\\n' "$?"\n`)
    })
  return { run, close: () => child.stdin.end() }
}

/** The commands of a shell block: continuation lines joined, each labelled by the comment above it. */
export const commandsOf = (script: string) => {
  const commands: Array<{ label: string; text: string }> = []
  let label = ""
  let pending: Array<string> = []
  for (const line of script.split("\n")) {
    if (pending.length === 0 && line.trim() === "") continue
    if (pending.length === 0 && line.startsWith("#")) {
      label = line.slice(1).trim()
      continue
    }
    pending.push(line)
    if (!line.endsWith("\\")) {
      commands.push({ label, text: pending.join("\n") })
      pending = []
    }
  }
  return commands
}
